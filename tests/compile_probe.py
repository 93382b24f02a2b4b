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
# Every collective kernel, bf16, with the size arguments marked divisible by 16 as Triton's launcher
# specialises them for power-of-two sizes.
from iris.ccl.all_gather import _all_gather_kernel  # noqa: E402
from iris.ccl.all_reduce import _all_reduce_one_shot_kernel, _all_reduce_two_shot_kernel  # noqa: E402
from iris.ccl.all_to_all import _all_to_all_kernel  # noqa: E402
from iris.ccl.reduce_scatter import _reduce_scatter_push_kernel  # noqa: E402
from iris.ccl.rooted import _pull_from_root_kernel, _root_pulls_kernel  # noqa: E402


def ccl_ptx(fn, data_sig, constexprs):
    sync = {"flags": "*i32", "heap_bases": "*i64", "members": "*i32", "rank": "i32", "group_index": "i32",
            "world_size": "i32"}
    signature = {**data_sig, **sync, **{k: "constexpr" for k in constexprs}}
    attrs = {(i,): [["tt.divisibility", 16]] for i, (name, ty) in enumerate(signature.items())
             if ty.startswith("*") or name in ("n", "shard")}
    src = triton.compiler.ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)
    return triton.compile(src, target=GPUTarget("cuda", 90, 32)).asm["ptx"]


data = {"out": "*bf16", "inp": "*bf16", "n": "i32"}
reduce_meta = {"GROUP_SIZE": 2, "OP": "sum", "ACC_FP32": True, "HINT": 16, "BLOCK": 4096}
move_meta = {"GROUP_SIZE": 2, "HINT": 16, "BLOCK": 4096}
for fn, sig, meta in [
    (_all_reduce_one_shot_kernel, data, reduce_meta),
    (_all_reduce_two_shot_kernel, {**data, "shard": "i32"}, reduce_meta),
    (_all_gather_kernel, data, move_meta),
    (_all_to_all_kernel, data, move_meta),
    (_pull_from_root_kernel, {"dst": "*bf16", "src": "*bf16", "n": "i32", "root": "i32", "root_index": "i32"},
     {**move_meta, "ROOT_COPIES": True}),
    (_root_pulls_kernel, {**data, "root_index": "i32"}, {**reduce_meta, "REDUCE": True}),
    (_reduce_scatter_push_kernel, {"out": "*bf16", "inp": "*bf16", "staging": "*bf16", "segment_flags": "*i32",
                                   "n": "i32", "segments": "i32", "flag_stride": "i32"}, {**reduce_meta, "SEGMENT": 4}),
]:
    out[f"ccl/{fn.__name__}"] = global_accesses(ccl_ptx(fn, sig, meta))
# The fused ops' kernels: tensor-core instructions in the K loop (wgmma on sm_90).
from iris.ops.all_gather_matmul import _all_gather_matmul_kernel  # noqa: E402
from iris.ops.gemm import _matmul_kernel  # noqa: E402
from iris.ops.matmul_all_gather import _matmul_all_gather_kernel  # noqa: E402

gemm_sig = {"a": "*bf16", "b": "*bf16", "c": "*bf16", "M": "i32", "N": "i32", "K": "i32", "stride_am": "i32",
            "stride_ak": "i32", "stride_bk": "i32", "stride_bn": "i32", "stride_cm": "i32", "stride_cn": "i32"}
tiles = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8}
pointer_meta = {**tiles, "TMA": False}
text = ptx(_matmul_kernel, {**gemm_sig, **{k: "constexpr" for k in pointer_meta}}, pointer_meta)
out["ops/_matmul_kernel"] = sorted(set(re.findall(r"\bwgmma\.\w+", text)))


def desc(rows, cols):
    return f"tensordesc<bf16[{rows}, {cols}]>"


# The TMA-fed mainloop: operand tiles arrive by cp.async.bulk.tensor (the SM's tensor-memory accelerator).
tma_meta = {**tiles, "TMA": True}
tma_sig = {**gemm_sig, "a": desc(128, 64), "b": desc(64, 128), "c": desc(128, 128)}
text = ptx(_matmul_kernel, {**tma_sig, **{k: "constexpr" for k in tma_meta}}, tma_meta)
out["ops/_matmul_kernel_tma"] = sorted(set(re.findall(r"\bwgmma\.\w+", text)))
out["tma/_matmul_kernel"] = sorted(set(re.findall(r"\bcp\.async\.bulk\.tensor\.2d\.\w+", text)))
sync_sig = {"flags": "*i32", "heap_bases": "*i64", "members": "*i32", "rank": "i32", "group_index": "i32",
            "world_size": "i32"}
split_sig = {"partials": "*fp32", "part_flags": "*i32", "full": "i32", "stream": "i32",  # split_tail's workspace
             "band_counts": "*i32", "band_cols": "i32", "engine_tiles": "i32"}  # and the copy engines' bands
fused = {"GROUP_SIZE": 2, **tiles}
traced = {**fused, "VEC": 16, "TRACE": False, "TMA": False, "COPY_ENGINE": False, "WARPS": 8}
# As Triton's launcher specialises row-major operands: unit column strides become constants.
unit = {"stride_ak": 1, "stride_bn": 1, "stride_on": 1}
strides = {"stride_am": "i32", "stride_ak": "constexpr", "stride_bk": "i32", "stride_bn": "constexpr",
           "stride_om": "i32", "stride_on": "constexpr"}
for fn, sig in [
    (_matmul_all_gather_kernel, {"a": "*bf16", "b": "*bf16", "out": "*bf16", "M": "i32", "N_local": "i32",
                                 "K": "i32", **strides, **sync_sig, "trace": "*i64", **split_sig}),
]:
    meta = {**unit, **traced}
    signature = {**sig, **sync_sig, **{k: "constexpr" for k in meta}}
    sizes = ("M", "N", "N_local", "K", "M_local", "stride_am", "stride_bk", "stride_om")
    text = ptx(fn, signature, meta, divisible=sizes)
    out[f"ops/{fn.__name__}"] = sorted(set(re.findall(r"\bwgmma\.\w+", text)))
    out[f"ops_access/{fn.__name__}"] = global_accesses(text)
    # Hopper's pipelined K loop fetches operand tiles with cp.async; its last operand is the bytes per copy.
    out[f"cp_async/{fn.__name__}"] = sorted(set(re.findall(r"cp\.async\.\w+\.shared\.global \[[^\]]*\], "
                                                          r"\[[^\]]*\], (\w+)", text)))
    if "trace" in sig:  # and once more with tracing compiled in
        out["trace/off"] = "%globaltimer" in text
        text = ptx(fn, signature, {**meta, "TRACE": True}, divisible=sizes)
        out["trace/on"] = ["%globaltimer" in text, "%smid" in text]
        # tiles stored locally and counted for the copy engines: 16-byte stores, each warp's lanes met and a
        # sys-scope fence before its count; and the flattened tile loop still software-pipelined (3 stages)
        text = ptx(fn, signature, {**meta, "COPY_ENGINE": True}, divisible=sizes)
        out["copy_engine/_matmul_all_gather_kernel"] = [
            global_accesses(text), bool(re.search(r"bar\.warp\.sync[^}]*fence\.acq_rel\.sys[^}]*red\.", text))]
        pipelined = {"TMA": True, "BLOCK_N": 256}
        shared = [compile_sm90(fn, {**signature, "a": desc(128, 64), "b": desc(64, 256)},
                               {**meta, **pipelined, "COPY_ENGINE": engine}, sizes, num_warps=8,
                               num_stages=3).metadata.shared for engine in (False, True)]
        out["copy_engine/pipelined"] = shared
# The fused GEMM + reduce-scatter / all-reduce kernel, TMA-fed.
from iris.ops.reduce_ops import _matmul_reduce_kernel  # noqa: E402

reduce_meta = {**fused, "TMA": True, "ALL_REDUCE": True, "STAGE_VEC": 16, "OUT_VEC": 16, **unit,
               "COPY_ENGINE": False, "WARPS": 8}
reduce_sig = {"a": desc(128, 64), "b": desc(64, 128), "out": "*bf16", "staging": "*bf16", "tile_flags": "*i32",
              "call": "*i32", "lag": "i32", "M_local": "i32", "N": "i32", "K": "i32", **strides, **sync_sig,
              "outbox": "*bf16", "band_counts": "*i32", "band_flags": "*i32", "band_cols": "i32",
              "engine_tiles": "i32"}
text = ptx(_matmul_reduce_kernel, {**reduce_sig, **{k: "constexpr" for k in reduce_meta}}, reduce_meta,
           divisible=("M_local", "N", "K", "stride_am", "stride_bk", "stride_om"))
out["ops/_matmul_reduce_kernel"] = sorted(set(re.findall(r"\bwgmma\.\w+", text)))
out["tma/_matmul_reduce_kernel"] = sorted(set(re.findall(r"\bcp\.async\.bulk\.tensor\.2d\.\w+", text)))
out["ops_access/_matmul_reduce_kernel"] = global_accesses(text)
# reduce_scatter through the copy engines: partials stored locally as 16-byte vectors, each warp's count fenced
text = ptx(_matmul_reduce_kernel, {**reduce_sig, **{k: "constexpr" for k in reduce_meta}},
           {**reduce_meta, "ALL_REDUCE": False, "COPY_ENGINE": True},
           divisible=("M_local", "N", "K", "stride_am", "stride_bk", "stride_om"))
out["copy_engine/_matmul_reduce_kernel"] = [
    global_accesses(text), bool(re.search(r"bar\.warp\.sync[^}]*fence\.acq_rel\.sys[^}]*red\.", text))]
# all_reduce through the copy engines: the reduced tiles of the early bands stored and counted the same way
text = ptx(_matmul_reduce_kernel, {**reduce_sig, **{k: "constexpr" for k in reduce_meta}},
           {**reduce_meta, "COPY_ENGINE": True}, divisible=("M_local", "N", "K", "stride_am", "stride_bk", "stride_om"))
out["copy_engine/_matmul_reduce_kernel/all_reduce"] = [
    global_accesses(text), bool(re.search(r"bar\.warp\.sync[^}]*fence\.acq_rel\.sys[^}]*red\.", text))]
# all_gather_matmul: communication programs copy A rows to peers; GEMM programs run the TMA mainloop.
ag_meta = {**fused, "COMM_PROGRAMS": 16, "COPY_K": 128, "VEC": 16, "TMA": True, **unit}
ag_sig = {"a": desc(128, 64), "a_rows": "*bf16", "gathered": desc(128, 64), "gathered_rows": "*bf16",
          "b": desc(64, 128), "out": desc(128, 128), "ready": "*i32", "call": "*i32", "M_local": "i32", "N": "i32",
          "K": "i32", **strides, **sync_sig}
text = ptx(_all_gather_matmul_kernel, {**ag_sig, **{k: "constexpr" for k in ag_meta}}, ag_meta,
           divisible=("M_local", "N", "K", "stride_am", "stride_bk", "stride_om"))
out["ops/_all_gather_matmul_kernel"] = sorted(set(re.findall(r"\bwgmma\.\w+", text)))
out["tma/_all_gather_matmul_kernel"] = sorted(set(re.findall(r"\bcp\.async\.bulk\.tensor\.2d\.\w+", text)))
out["ops_access/_all_gather_matmul_kernel"] = global_accesses(text)
out["fence/_all_gather_matmul_kernel"] = "fence.proxy.async" in text
# all_gather_matmul with the rows carried by the copy engines: every program runs the TMA mainloop.
from iris.ops.all_gather_matmul import _all_gather_matmul_engines_kernel  # noqa: E402

agce_meta = {**fused, "TMA": True, **unit}
agce_sig = {"a": desc(128, 64), "gathered": desc(128, 64), "b": desc(64, 128), "out": desc(128, 128),
            "arrived": "*i32", "go": "*i32", "M_local": "i32", "N": "i32", "K": "i32", **strides, **sync_sig}
text = ptx(_all_gather_matmul_engines_kernel, {**agce_sig, **{k: "constexpr" for k in agce_meta}}, agce_meta,
           divisible=("M_local", "N", "K", "stride_am", "stride_bk", "stride_om"))
out["ops/_all_gather_matmul_engines_kernel"] = sorted(set(re.findall(r"\bwgmma\.\w+", text)))
out["tma/_all_gather_matmul_engines_kernel"] = sorted(set(re.findall(r"\bcp\.async\.bulk\.tensor\.2d\.\w+", text)))
out["fence/_all_gather_matmul_engines_kernel"] = "fence.proxy.async" in text
# Shared memory of every GEMM kernel at the tiles, warps and stages OpsConfig picks on GPUs, per dtype: it must
# fit one H100/H200 SM (the launch fails otherwise, and only on the GPU).
import torch  # noqa: E402

from iris.ops import OpsConfig  # noqa: E402

config = OpsConfig()
for torch_dtype, ty in [(torch.bfloat16, "bf16"), (torch.float32, "fp32")]:
    bm, bn, bk = config.blocks("cuda", torch_dtype)
    options = {"num_warps": config.num_warps, "num_stages": config.stages()}
    tiles = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": config.group_m}
    fused = {"GROUP_SIZE": 2, **tiles}
    a, b, c = (f"tensordesc<{ty}[{bm}, {bk}]>", f"tensordesc<{ty}[{bk}, {bn}]>", f"tensordesc<{ty}[{bm}, {bn}]>")
    dense = {k: (f"*{ty}" if v == "*bf16" else v) for k, v in gemm_sig.items()}
    sizes = ("M", "N", "N_local", "K", "M_local", "stride_am", "stride_bk", "stride_om")
    for fn, sig, meta in [
        (_matmul_kernel, {**dense, "a": a, "b": b, "c": c}, {**tiles, "TMA": True}),
        (_matmul_all_gather_kernel, {"a": a, "b": b, "out": f"*{ty}", "M": "i32", "N_local": "i32", "K": "i32",
                                     **strides, **sync_sig, "trace": "*i64", **split_sig},
         {**unit, **fused, "VEC": 16, "TRACE": False, "TMA": True, "COPY_ENGINE": False,
          "WARPS": config.num_warps}),
        (_matmul_reduce_kernel, {**reduce_sig, "a": a, "b": b, "out": f"*{ty}", "staging": f"*{ty}",
                                 "outbox": f"*{ty}"}, {**reduce_meta, **fused, "WARPS": config.num_warps}),
        (_all_gather_matmul_kernel, {**ag_sig, "a": a, "a_rows": f"*{ty}", "gathered": a, "gathered_rows": f"*{ty}",
                                     "b": b, "out": c}, {**ag_meta, **fused}),
        (_all_gather_matmul_engines_kernel, {**agce_sig, "a": a, "gathered": a, "b": b, "out": c},
         {**agce_meta, **fused}),
    ]:
        kernel = compile_sm90(fn, {**sig, **{k: "constexpr" for k in meta}}, meta, sizes, **options)
        out[f"shared/{fn.__name__}/{ty}"] = kernel.metadata.shared
        if "COPY_ENGINE" in meta:  # and with the copy engines' loops (flattened separately: more buffers)
            engines = {**meta, "COPY_ENGINE": True}
            kernel = compile_sm90(fn, {**sig, **{k: "constexpr" for k in engines}}, engines, sizes, **options)
            out[f"shared/{fn.__name__}_copy_engine/{ty}"] = kernel.metadata.shared
# The group barrier's signal: bar.sync, one system-scope fence, then relaxed adds (one per member).
from iris.device.sync import _device_barrier_kernel  # noqa: E402

text = ptx(_device_barrier_kernel, {"flags": "*i32", "heap_bases": "*i64", "members": "*i32", "rank": "i32",
                                    "GROUP_SIZE": "constexpr"}, {"GROUP_SIZE": 2})
out["barrier/sequence"] = re.findall(r"\bbar\.sync|\bfence\.[\w.]+|\bmembar\.\w+|\batom\.[\w.]+", text)
print("RESULT" + json.dumps(out))
