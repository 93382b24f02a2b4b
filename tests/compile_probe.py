"""Compile iris kernels for sm_90 without a GPU and print what the PTX shows (used by test_compile.py)."""

import json
import re

import iris
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget

@triton.jit
def copy_kernel(src, dst, heap_bases, rank, peer, OP: tl.constexpr, HINT: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if OP == "load":
        tl.store(dst + offs, iris.load(src + offs, rank, peer, heap_bases, hint=HINT))
    elif OP == "store":
        iris.store(dst + offs, tl.load(src + offs), rank, peer, heap_bases, hint=HINT)
    elif OP == "get":
        iris.get(src + offs, dst + offs, rank, peer, heap_bases, hint=HINT)
    elif OP == "put":
        iris.put(src + offs, dst + offs, rank, peer, heap_bases, hint=HINT)
    else:
        iris.copy(src + offs, dst + offs, peer, rank, rank, heap_bases, hint=HINT)

@triton.jit
def atomic_kernel(flag, heap_bases, rank, peer, SEM: tl.constexpr, SCOPE: tl.constexpr):
    iris.atomic_add(flag, 1, rank, peer, heap_bases, sem=SEM, scope=SCOPE)
    iris.atomic_cas(flag + 1, 0, 1, rank, peer, heap_bases, sem=SEM, scope=SCOPE)

@triton.jit
def context_kernel(context, buf, RANK: tl.constexpr, WORLD_SIZE: tl.constexpr, BLOCK: tl.constexpr):
    ctx = iris.DeviceContext.initialize(context, RANK, WORLD_SIZE)
    offs = tl.arange(0, BLOCK)
    x = ctx.load(buf + offs, (RANK + 1) % WORLD_SIZE, hint=16)
    ctx.store(buf + offs, x + 1, (RANK + 1) % WORLD_SIZE, hint=16)
    ctx.atomic_add(buf, 1.0, 0, sem="release", scope="sys")

@triton.jit
def publish_kernel(data, flag, heap_bases, rank, peer, SEM: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    iris.store(data + offs, tl.load(data + offs) + 1, rank, peer, heap_bases, hint=16)
    iris.atomic_xchg(flag, 1, rank, peer, heap_bases, sem=SEM, scope="sys")


def compile_sm90(fn, signature, constexprs, divisible=(), **options):
    # Pointer arguments marked 16-byte aligned, and the integers named in ``divisible`` multiples of 16, as
    # Triton's launcher specialises them for torch tensors and such sizes.
    aligned = {(i,): [["tt.divisibility", 16]] for i, (name, ty) in enumerate(signature.items())
               if ty.startswith("*") or name in divisible}
    src = triton.compiler.ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=aligned)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=options)


def ptx(fn, signature, constexprs, divisible=()):
    return compile_sm90(fn, signature, constexprs, divisible).asm["ptx"]

def global_accesses(text):
    return sorted(set(re.findall(r"\b(?:ld|st)\.global[\w.]*", text)))

out = {}
sig = {"src": "*fp32", "dst": "*fp32", "heap_bases": "*i64", "rank": "i32", "peer": "i32", "OP": "constexpr",
       "HINT": "constexpr", "BLOCK": "constexpr"}
for op in ["load", "store", "get", "put", "copy"]:
    for hint in [None, 16]:
        text = ptx(copy_kernel, sig, {"OP": op, "HINT": hint, "BLOCK": 1024})
        out[f"{op}/{hint}"] = global_accesses(text)
        out[f"debug_code/{op}/{hint}"] = "__assertfail" in text or "vprintf" in text
sig = {"flag": "*i32", "heap_bases": "*i64", "rank": "i32", "peer": "i32", "SEM": "constexpr", "SCOPE": "constexpr"}
for sem in ["relaxed", "acquire", "release", "acq_rel"]:
    for scope in ["cta", "gpu", "sys"]:
        text = ptx(atomic_kernel, sig, {"SEM": sem, "SCOPE": scope})
        out[f"atom/{sem}/{scope}"] = sorted(set(re.findall(r"\batom\.[\w.]+", text)))
sig = {"context": "*i64", "buf": "*fp32", "RANK": "constexpr", "WORLD_SIZE": "constexpr", "BLOCK": "constexpr"}
text = ptx(context_kernel, sig, {"RANK": 0, "WORLD_SIZE": 2, "BLOCK": 1024})
out["context"] = global_accesses(text) + sorted(set(re.findall(r"\b(?:atom|red)\.[\w.]+", text)))
sig = {"data": "*fp32", "flag": "*i32", "heap_bases": "*i64", "rank": "i32", "peer": "i32", "SEM": "constexpr",
       "BLOCK": "constexpr"}
for sem in ["relaxed", "release", "acq_rel", "acquire"]:
    text = ptx(publish_kernel, sig, {"SEM": sem, "BLOCK": 1024})
    # the instruction stream between the data stores and the flag atomic
    between = text[text.rindex("st.global"):text.index("atom.global")]
    out[f"publish/{sem}"] = bool(re.search(r"\b(?:bar|barrier)\.sync", between))
# The library's kernels, compiled as Triton's launcher specialises real arguments (``sm90.launch_compile``).
import torch  # noqa: E402
from triton.tools.tensor_descriptor import TensorDescriptor  # noqa: E402

from sm90 import SYNC, launch_compile, ptr  # noqa: E402


def desc(rows, cols, dtype=torch.bfloat16):
    """A tensor descriptor over a 4096 x 4096 matrix with [rows, cols] blocks."""
    return TensorDescriptor(ptr(dtype), [4096, 4096], [4096, 1], [rows, cols])


# Every collective kernel, bf16, with power-of-two sizes.
from iris.ccl.all_gather import _all_gather_kernel  # noqa: E402
from iris.ccl.all_reduce import _all_reduce_one_shot_kernel, _all_reduce_two_shot_kernel  # noqa: E402
from iris.ccl.all_to_all import _all_to_all_kernel  # noqa: E402
from iris.ccl.reduce_scatter import _reduce_scatter_push_kernel  # noqa: E402
from iris.ccl.rooted import _pull_from_root_kernel, _root_pulls_kernel  # noqa: E402

N_ELEMENTS = 1 << 20
reduce_meta = {"GROUP_SIZE": 2, "OP": "sum", "ACC_FP32": True, "HINT": 16, "BLOCK": 4096}
move_meta = {"GROUP_SIZE": 2, "HINT": 16, "BLOCK": 4096}
data = (ptr(), ptr(), N_ELEMENTS)
for fn, args, meta in [
    (_all_reduce_one_shot_kernel, (*data, SYNC), reduce_meta),
    (_all_reduce_two_shot_kernel, (*data, N_ELEMENTS // 2, SYNC), reduce_meta),
    (_all_gather_kernel, (*data, SYNC), move_meta),
    (_all_to_all_kernel, (ptr(), ptr(), 1, N_ELEMENTS, 64, SYNC), move_meta),  # (rows, n, col_programs)
    (_pull_from_root_kernel, (ptr(), ptr(), ptr(), N_ELEMENTS, 7, 2, SYNC), {**move_meta, "ROOT_COPIES": True}),
    (_root_pulls_kernel, (*data, 2, SYNC), {**reduce_meta, "REDUCE": True}),
    (_reduce_scatter_push_kernel, (*data, (ptr(), ptr(torch.int32), 4096), 64, SYNC), {**reduce_meta, "SEGMENT": 4}),
]:
    out[f"ccl/{fn.__name__}"] = global_accesses(launch_compile(fn, *args, **meta).asm["ptx"])
# The fused ops' kernels: tensor-core instructions in the K loop (wgmma on sm_90).
from iris.ops.all_gather_matmul import _all_gather_matmul_engines_kernel, _all_gather_matmul_kernel  # noqa: E402
from iris.ops.gemm import _matmul_kernel  # noqa: E402
from iris.ops.matmul_all_gather import _matmul_all_gather_kernel  # noqa: E402
from iris.ops.reduce_ops import _matmul_reduce_kernel  # noqa: E402

SIZE = 4096  # M, N, K and the local sizes: multiples of 16 every block divides
ROW_MAJOR = ((SIZE, 1), (SIZE, 1), (SIZE, 1))  # A's, B's and out's strides: unit column strides become constants
tile = (128, 128, 64, 8)  # BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M
text = launch_compile(_matmul_kernel, ptr(), ptr(), ptr(), ROW_MAJOR, (SIZE, SIZE, SIZE), TILE=tile,
                      TMA=False).asm["ptx"]
out["ops/_matmul_kernel"] = sorted(set(re.findall(r"\bwgmma\.\w+", text)))
# The TMA-fed mainloop: operand tiles arrive by cp.async.bulk.tensor (the SM's tensor-memory accelerator).
text = launch_compile(_matmul_kernel, desc(128, 64), desc(64, 128), desc(128, 128), ROW_MAJOR, (SIZE, SIZE, SIZE),
                      TILE=tile, TMA=True).asm["ptx"]
out["ops/_matmul_kernel_tma"] = sorted(set(re.findall(r"\bwgmma\.\w+", text)))
out["tma/_matmul_kernel"] = sorted(set(re.findall(r"\bcp\.async\.bulk\.tensor\.2d\.\w+", text)))


def all_gather_args(a, b, out_ptr, dtype=torch.bfloat16):
    """matmul_all_gather's arguments up to the constexprs: a trace buffer, the stream-K workspace (partials,
    part_flags, full, stream) and the copy engines' bands (band_counts, band_cols, engine_tiles)."""
    return (a, b, out_ptr, ROW_MAJOR, (SIZE, SIZE, SIZE), SYNC, ptr(torch.int64),
            (ptr(torch.float32), ptr(torch.int32), 96, 132), (ptr(torch.int32), 3, 48))


fused = {"GROUP_SIZE": 2, "TILE": tile}
traced = {**fused, "VEC": 16, "TRACE": False, "TMA": False, "COPY_ENGINE": False, "WARPS": 8}
text = launch_compile(_matmul_all_gather_kernel, *all_gather_args(ptr(), ptr(), ptr()), **traced).asm["ptx"]
out["ops/_matmul_all_gather_kernel"] = sorted(set(re.findall(r"\bwgmma\.\w+", text)))
out["ops_access/_matmul_all_gather_kernel"] = global_accesses(text)
# Hopper's pipelined K loop fetches operand tiles with cp.async; its last operand is the bytes per copy.
out["cp_async/_matmul_all_gather_kernel"] = sorted(set(re.findall(r"cp\.async\.\w+\.shared\.global \[[^\]]*\], "
                                                                  r"\[[^\]]*\], (\w+)", text)))
out["trace/off"] = "%globaltimer" in text
text = launch_compile(_matmul_all_gather_kernel, *all_gather_args(ptr(), ptr(), ptr()),
                      **{**traced, "TRACE": True}).asm["ptx"]
out["trace/on"] = ["%globaltimer" in text, "%smid" in text]
# tiles stored locally and counted for the copy engines: 16-byte stores, each warp's lanes met and a sys-scope
# fence before its count; and the flattened tile loop still software-pipelined (3 stages)
text = launch_compile(_matmul_all_gather_kernel, *all_gather_args(ptr(), ptr(), ptr()),
                      **{**traced, "COPY_ENGINE": True}).asm["ptx"]
out["copy_engine/_matmul_all_gather_kernel"] = [
    global_accesses(text), bool(re.search(r"bar\.warp\.sync[^}]*fence\.acq_rel\.sys[^}]*red\.", text))]
out["copy_engine/pipelined"] = [
    launch_compile(_matmul_all_gather_kernel, *all_gather_args(desc(128, 64), desc(64, 256), ptr()),
                   **{**traced, "TILE": (128, 256, 64, 8), "TMA": True, "COPY_ENGINE": engine}, num_warps=8,
                   num_stages=3).metadata.shared for engine in (False, True)]


def reduce_args(a, b, out_ptr, dtype=torch.bfloat16):
    """The fused reduce kernel's arguments up to the constexprs: reduce (staging, tile_flags, call, lag) and the
    copy engines' (outbox, band_counts, band_flags, band_cols, engine_tiles)."""
    return (a, b, out_ptr, ROW_MAJOR, (SIZE, SIZE, SIZE), SYNC, (ptr(dtype), ptr(torch.int32), ptr(torch.int32), 66),
            (ptr(dtype), ptr(torch.int32), ptr(torch.int32), 3, 96))


# The fused GEMM + reduce-scatter / all-reduce kernel, TMA-fed.
reduce_meta = {**fused, "TMA": True, "ALL_REDUCE": True, "VEC": (16, 16), "COPY_ENGINE": False, "WARPS": 8}
text = launch_compile(_matmul_reduce_kernel, *reduce_args(desc(128, 64), desc(64, 128), ptr()), **reduce_meta).asm[
    "ptx"]
out["ops/_matmul_reduce_kernel"] = sorted(set(re.findall(r"\bwgmma\.\w+", text)))
out["tma/_matmul_reduce_kernel"] = sorted(set(re.findall(r"\bcp\.async\.bulk\.tensor\.2d\.\w+", text)))
out["ops_access/_matmul_reduce_kernel"] = global_accesses(text)
# through the copy engines, reduce_scatter and all_reduce: partials (and all_reduce's reduced tiles of the early
# bands) stored locally as 16-byte vectors, each warp's count fenced
for variant, all_reduce in (("", False), ("/all_reduce", True)):
    text = launch_compile(_matmul_reduce_kernel, *reduce_args(desc(128, 64), desc(64, 128), ptr()),
                          **{**reduce_meta, "ALL_REDUCE": all_reduce, "COPY_ENGINE": True}).asm["ptx"]
    out[f"copy_engine/_matmul_reduce_kernel{variant}"] = [
        global_accesses(text), bool(re.search(r"bar\.warp\.sync[^}]*fence\.acq_rel\.sys[^}]*red\.", text))]


def gather_args(a, gathered, b, out_desc, dtype=torch.bfloat16):
    """all_gather_matmul's arguments up to the constexprs (descriptors, and the same tensors as pointers)."""
    return (a, ptr(dtype), gathered, ptr(dtype), b, out_desc, ROW_MAJOR, (SIZE, SIZE, SIZE), SYNC, ptr(torch.int32),
            ptr(torch.int32))


def engines_args(a, gathered, b, out_desc):
    return (a, gathered, ptr(torch.bfloat16), b, out_desc, ROW_MAJOR, (SIZE, SIZE, SIZE), SYNC, ptr(torch.int32),
            ptr(torch.int32), ptr(torch.int32))


# all_gather_matmul: communication programs copy A rows to peers; GEMM programs run the TMA mainloop.
ag_meta = {**fused, "COMM_PROGRAMS": 16, "COPY_K": 128, "VEC": 16, "TMA": True}
text = launch_compile(_all_gather_matmul_kernel, *gather_args(desc(128, 64), desc(128, 64), desc(64, 128),
                                                              desc(128, 128)), **ag_meta).asm["ptx"]
out["ops/_all_gather_matmul_kernel"] = sorted(set(re.findall(r"\bwgmma\.\w+", text)))
out["tma/_all_gather_matmul_kernel"] = sorted(set(re.findall(r"\bcp\.async\.bulk\.tensor\.2d\.\w+", text)))
out["ops_access/_all_gather_matmul_kernel"] = global_accesses(text)
out["fence/_all_gather_matmul_kernel"] = "fence.proxy.async" in text
# all_gather_matmul with the rows carried by the copy engines: every program runs the TMA mainloop.
agce_meta = {**fused, "TMA": True}
text = launch_compile(_all_gather_matmul_engines_kernel, *engines_args(desc(128, 64), desc(128, 64), desc(64, 128),
                                                                       desc(128, 128)), **agce_meta).asm["ptx"]
out["ops/_all_gather_matmul_engines_kernel"] = sorted(set(re.findall(r"\bwgmma\.\w+", text)))
out["tma/_all_gather_matmul_engines_kernel"] = sorted(set(re.findall(r"\bcp\.async\.bulk\.tensor\.2d\.\w+", text)))
out["fence/_all_gather_matmul_engines_kernel"] = "fence.proxy.async" in text
# Shared memory of every GEMM kernel at the tiles, warps and stages OpsConfig picks on GPUs, per dtype: it must
# fit one H100/H200 SM (the launch fails otherwise, and only on the GPU).
from iris.ops import OpsConfig  # noqa: E402

config = OpsConfig()
for dtype, ty in [(torch.bfloat16, "bf16"), (torch.float32, "fp32")]:
    bm, bn, bk = config.blocks("cuda", dtype)
    options = {"num_warps": config.num_warps, "num_stages": config.stages()}
    fused = {"GROUP_SIZE": 2, "TILE": (bm, bn, bk, config.group_m)}
    a, b, c = desc(bm, bk, dtype), desc(bk, bn, dtype), desc(bm, bn, dtype)
    for fn, args, meta in [
        (_matmul_kernel, (a, b, c, ROW_MAJOR, (SIZE, SIZE, SIZE)), {"TILE": fused["TILE"], "TMA": True}),
        (_matmul_all_gather_kernel, all_gather_args(a, b, ptr(dtype), dtype),
         {**fused, "VEC": 16, "TRACE": False, "TMA": True, "COPY_ENGINE": False, "WARPS": config.num_warps}),
        (_matmul_reduce_kernel, reduce_args(a, b, ptr(dtype), dtype),
         {**reduce_meta, **fused, "WARPS": config.num_warps}),
        (_all_gather_matmul_kernel, gather_args(a, a, b, c, dtype), {**ag_meta, **fused}),
        (_all_gather_matmul_engines_kernel, engines_args(a, a, b, c), {**agce_meta, **fused}),
    ]:
        out[f"shared/{fn.__name__}/{ty}"] = launch_compile(fn, *args, **meta, **options).metadata.shared
        if "COPY_ENGINE" in meta:  # and with the copy engines' loops (flattened separately: more buffers)
            out[f"shared/{fn.__name__}_copy_engine/{ty}"] = launch_compile(
                fn, *args, **{**meta, "COPY_ENGINE": True}, **options).metadata.shared
# The group barrier's signal: bar.sync, one system-scope fence, then relaxed adds (one per member).
from iris.device.sync import _device_barrier_kernel  # noqa: E402

text = ptx(_device_barrier_kernel, {"flags": "*i64", "heap_bases": "*i64", "members": "*i32", "rank": "i32",
                                    "GROUP_SIZE": "constexpr"}, {"GROUP_SIZE": 2})
out["barrier/sequence"] = re.findall(r"\bbar\.sync|\bfence\.[\w.]+|\bmembar\.\w+|\batom\.[\w.]+", text)
# Remote tile stores of iris.x, no hint anywhere: the translated pointers keep the tile's alignment and contiguity.
import iris.x  # noqa: E402


@triton.jit
def x_tile_store_kernel(x, out, context, M, N, stride_m, stride_n, RANK: tl.constexpr, WORLD_SIZE: tl.constexpr,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    ctx = iris.DeviceContext.initialize(context, RANK, WORLD_SIZE)
    pid_m, pid_n = tl.program_id(0), tl.program_id(1)
    ptrs, mask = iris.x.tile_ptr(x, M, N, stride_m, stride_n, pid_m, pid_n, BLOCK_M, BLOCK_N)
    tile = iris.x.Tile(pid_m, pid_n, BLOCK_M, BLOCK_N, tl.load(ptrs, mask=mask, other=0))
    iris.x.all_gather(tile, iris.x.make_tensor_view(out, WORLD_SIZE * M, N, stride_m, stride_n), 0, ctx)


text = launch_compile(x_tile_store_kernel, ptr(), ptr(), ptr(torch.int64), SIZE, SIZE, SIZE, 1, RANK=0, WORLD_SIZE=2,
                      BLOCK_M=64, BLOCK_N=64).asm["ptx"]
out["x/all_gather"] = global_accesses(text)
print("RESULT" + json.dumps(out))
