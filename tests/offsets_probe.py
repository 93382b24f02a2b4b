"""Compile the collective kernels for sm_90 without a GPU, as their launchers would specialise them for a call
with fewer than 2**31 elements per rank (``n`` an i32), and print, per kernel, what its TTIR and PTX show about
the width of its element offsets (used by test_offsets.py)."""

import json
import re

import iris  # noqa: F401  (first: the backend choice)
import torch

from iris.ccl.all_gather import _all_gather_kernel
from iris.ccl.all_reduce import _all_reduce_one_shot_kernel, _all_reduce_staged_kernel, _all_reduce_two_shot_kernel
from iris.ccl.all_to_all import _all_to_all_kernel
from iris.ccl.reduce_scatter import _reduce_scatter_push_kernel
from iris.ccl.reduce_scatter_v import _reduce_scatter_v_kernel
from iris.ccl.rooted import _pull_from_root_kernel, _root_pulls_kernel
from sm90 import SYNC, launch_compile, ptr

BLOCK = 4096
DATA = ("anchor", "out", "inp", "staging", "src", "dst")
STAGED = (ptr(torch.int8), ptr(torch.int32), 3)  # the push's (staging, segment_flags, flag_stride)
N = 1 << 20  # fewer than 2**31 elements per rank, a multiple of 16, as the launcher specialises a large call
CONSTEXPRS = {"GROUP_SIZE": 3, "HINT": 16, "BLOCK": BLOCK, "OP": "sum", "ACC_FP32": False, "SEGMENT": 4,
              "ROOT_COPIES": True, "REDUCE": False}
KERNELS = {"all_gather": _all_gather_kernel, "all_to_all": _all_to_all_kernel,
           "reduce_scatter_push": _reduce_scatter_push_kernel, "all_reduce_one_shot": _all_reduce_one_shot_kernel,
           "all_reduce_staged": _all_reduce_staged_kernel, "all_reduce_two_shot": _all_reduce_two_shot_kernel,
           "pull_from_root": _pull_from_root_kernel, "root_pulls": _root_pulls_kernel,
           "reduce_scatter_v": _reduce_scatter_v_kernel}


def compile_sm90(fn, constexprs):
    """``fn`` with byte data pointers, the group's sync tuple, ``n`` = N and every other int at 3 (neither 1 nor a
    multiple of 16, so it stays a plain i32), as the launcher specialises them."""
    args = []
    for param in fn.params:
        if param.is_constexpr:
            continue
        name = param.name
        args.append(SYNC if name == "sync" else STAGED if name == "staged" else N if name == "n" else
                    ptr(torch.int8) if name in DATA else 3)
    used = {k: v for k, v in constexprs.items() if k in fn.arg_names}
    return launch_compile(fn, *args, num_warps=8, **used)


out = {}
for name, fn in KERNELS.items():
    kernel = compile_sm90(fn, CONSTEXPRS)
    ttir = kernel.asm["ttir"]
    out[name] = {
        # a 32-bit multiply by the element count (slot or slice offsets: group_index * n)
        "i32_multiplies_of_n": re.findall(r"arith\.muli [^\n]*%(?:n|shard)\b[^\n]*: i32\b", ttir),
        # the types of the loops over block starts
        "block_loop_types": re.findall(r"scf\.for %start\w* = [^\n]*:\s*(i\d+)", ttir),
        # masks compared on 32-bit lanes
        "i32_lane_masks": len(re.findall(rf"arith\.cmpi slt, %offs\w*, [^\n]*: tensor<{BLOCK}xi32>", ttir)),
        # 64-bit element arithmetic on whole blocks beyond what translate does (its byte offset)
        "i64_block_adds": len(re.findall(rf"arith\.addi [^\n]*: tensor<{BLOCK}xi64>", ttir)),
        "vector_accesses": sorted(set(re.findall(r"\b(?:ld|st)\.global\.v4\.\w+", kernel.asm["ptx"]))),
    }
print(json.dumps(out))
