"""Compile the Gluon paths for sm_90 without a GPU and print what their PTX shows beside the Triton paths' (used by
test_gluon.py; ``python tests/gluon_probe.py`` prints the table docs/results.md quotes)."""

import json
import re
import sys

import torch
import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

import iris
from iris.ccl.gluon.all_gather import _all_gather_gluon_kernel
from iris.ccl.gluon.all_to_all import _all_to_all_gluon_kernel
from iris.gluon import IrisDeviceCtx

triton_all_gather = sys.modules["iris.ccl.all_gather"]  # the module: iris.ccl's attribute is the function
from sm90 import SYNC, launch_compile, ptr

BLOCK = 4096  # the latency-bound all_gather block: 16 elements per thread at 8 warps


@gluon.jit
def gluon_store_kernel(IrisDeviceCtx: gl.constexpr, context_tensor, src, dst, peer, BLOCK: gl.constexpr,
                       HINT: gl.constexpr):
    ctx = IrisDeviceCtx.initialize(context_tensor)
    layout: gl.constexpr = gl.BlockedLayout([BLOCK // (32 * gl.num_warps())], [32], [gl.num_warps()], [0])
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=layout)
    ctx.store(dst + offs, gl.load(src + offs), peer, hint=HINT)
    ctx.atomic_xchg(dst + 0 * offs, 1, peer, mask=offs < 1, sem="release", scope="sys")


@triton.jit
def triton_store_kernel(context, src, dst, peer, BLOCK: tl.constexpr, HINT: tl.constexpr):
    ctx = iris.DeviceContext.initialize(context, 0, 2)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ctx.store(dst + offs, tl.load(src + offs), peer, hint=HINT)
    ctx.atomic_xchg(dst, 1, peer, sem="release", scope="sys")


def summary(kernel):
    text = kernel.asm["ptx"]
    ops = re.findall(r"(?:^|\s)((?:ld|st|atom|red|fence|bar|membar)\.[\w.]+|bar\.sync|fence\.[\w.]+)", text, re.M)
    return {"ops": sorted(set(ops)), "st.global": sum(o.startswith("st.global") for o in ops),
            "fences": sorted({o for o in ops if o.startswith(("fence", "membar", "bar"))})}


def main():
    out = {}
    for hint in (None, 16):
        out[f"gluon_store/{hint}"] = summary(launch_compile(gluon_store_kernel, IrisDeviceCtx, ptr(torch.int64),
                                                            ptr(torch.float32), ptr(torch.float32), 3, BLOCK=BLOCK,
                                                            HINT=hint, num_warps=8))
        out[f"triton_store/{hint}"] = summary(launch_compile(triton_store_kernel, ptr(torch.int64),
                                                             ptr(torch.float32), ptr(torch.float32), 3, BLOCK=BLOCK,
                                                             HINT=hint, num_warps=8))
    for name, kernel in (("gluon_all_gather", _all_gather_gluon_kernel),
                         ("triton_all_gather", triton_all_gather._all_gather_kernel)):
        extra = {} if name.startswith("triton") else {"THREADS_PER_WARP": 32}
        out[name] = summary(launch_compile(kernel, ptr(torch.bfloat16), ptr(torch.bfloat16), 1 << 20, SYNC,
                                           GROUP_SIZE=4, HINT=16, BLOCK=BLOCK, num_warps=8, **extra))
    # rows, n, col_programs as the launcher passes them for a (4096, 4 * 4096) bf16 all_to_all
    out["gluon_all_to_all"] = summary(launch_compile(_all_to_all_gluon_kernel, ptr(torch.bfloat16),
                                                     ptr(torch.bfloat16), 4096, 4096, 3, SYNC, GROUP_SIZE=4, HINT=16,
                                                     BLOCK=BLOCK, THREADS_PER_WARP=32, num_warps=8))
    print("RESULT" + json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
