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
from iris.ccl.gluon.all_gather_tma import MAX_MEMBERS, STAGES, _all_gather_tma_kernel, tile_shape
from iris.ccl.gluon.all_to_all import _all_to_all_gluon_kernel
from iris.device.trace_events import TraceEvent
from iris.gluon import IrisDeviceCtx

triton_all_gather = sys.modules["iris.ccl.all_gather"]  # the module: iris.ccl's attribute is the function
from sm90 import SYNC, launch_compile, launch_source, ptr

BLOCK = 4096  # the latency-bound all_gather block: 16 elements per thread at 8 warps


@gluon.jit
def gluon_store_kernel(IrisDeviceCtx: gl.constexpr, context_tensor, src, dst, peer, BLOCK: gl.constexpr,
                       HINT: gl.constexpr):
    ctx = IrisDeviceCtx.initialize(context_tensor)
    layout: gl.constexpr = gl.BlockedLayout([BLOCK // (32 * gl.num_warps())], [32], [gl.num_warps()], [0])
    offs = gl.program_id(0) * BLOCK + gl.arange(0, BLOCK, layout=layout)
    ctx.store(dst + offs, gl.load(src + offs), peer, hint=HINT)
    ctx.atomic_xchg(dst + 0 * offs, 1, peer, mask=offs < 1, sem="release", scope="sys")


@gluon.jit
def gluon_traced_put_kernel(IrisDeviceCtx: gl.constexpr, context_tensor, src, dst, peer, BLOCK: gl.constexpr,
                            TRACING: gl.constexpr):
    ctx = IrisDeviceCtx.initialize(context_tensor, tracing=TRACING)
    layout: gl.constexpr = gl.BlockedLayout([BLOCK // (32 * gl.num_warps())], [32], [gl.num_warps()], [0])
    offs = gl.arange(0, BLOCK, layout=layout)
    handle = ctx.tracing.record_event_start(event_id=TraceEvent().put, target_rank=peer, address=dst + offs,
                                            pid_m=gl.program_id(0), pid_n=0, mask=offs < BLOCK)
    ctx.put(src + offs, dst + offs, peer)
    ctx.tracing.record_event_end(handle)


def traced_ops(tracing):
    """The tracing path's footprint in the Triton IR of a Gluon put compiled with ``TRACING``: its reductions (the
    event's address and payload) and atomics (the event counters)."""
    ir = launch_compile(gluon_traced_put_kernel, IrisDeviceCtx, ptr(torch.int64), ptr(torch.float32),
                        ptr(torch.float32), 3, BLOCK=BLOCK, TRACING=tracing, num_warps=8).asm["ttgir"]
    return {"reduce": ir.count("tt.reduce"), "atomic": ir.count("tt.atomic_rmw")}


@triton.jit
def triton_store_kernel(context, src, dst, peer, BLOCK: tl.constexpr, HINT: tl.constexpr):
    ctx = iris.DeviceContext.initialize(context, 0, 2)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ctx.store(dst + offs, tl.load(src + offs), peer, hint=HINT)
    ctx.atomic_xchg(dst, 1, peer, sem="release", scope="sys")


def copy_loop(text):
    """The instructions of the innermost loop that stores to global memory (the copy loop), and the byte distance
    between a thread's first two 16-byte stores in it (the register layout's step: 16 when a thread's vectors sit
    side by side, 32 * 16 = 512 times the warps' count when each warp instruction covers contiguous bytes)."""
    for body in re.findall(r"Inner Loop Header.*?\n(.*?)\n\s*@%p\d+ bra", text, re.S):
        if "st.global" in body:
            lines = [ln.strip() for ln in body.splitlines()]
            code = [ln for ln in lines if ln and not ln.startswith(("//", ".loc", "$L"))]
            step = re.search(r"add\.s64\s+%rd\d+, %rd\d+, (\d+);", body)
            return len(code), int(step.group(1)) if step else None
    return None, None


def summary(kernel):
    text = kernel.asm["ptx"]
    ops = re.findall(r"(?:^|\s)((?:ld|st|atom|red|fence|bar|membar)\.[\w.]+|bar\.sync|fence\.[\w.]+)", text, re.M)
    loop, step = copy_loop(text)
    return {"ops": sorted(set(ops)), "st.global": sum(o.startswith("st.global") for o in ops),
            "fences": sorted({o for o in ops if o.startswith(("fence", "membar", "bar"))}),
            "loop_instructions": loop, "vector_step_bytes": step}


def tma_summary(members, rows, block_m, cols, warps):
    """The bulk-copy instructions of the TMA all_gather and their order around the closing barrier's release."""
    from triton.experimental.gluon.language import NVMMASharedLayout
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    layout = NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=16, rank=2)
    slot = TensorDescriptor(torch.empty(rows * cols, dtype=torch.bfloat16), [rows, cols], [cols, 1], [block_m, cols],
                            layout)
    kernel = launch_compile(_all_gather_tma_kernel, ptr(torch.bfloat16), ptr(torch.bfloat16), rows, SYNC,
                            *[slot] * members,
                            *[None] * (MAX_MEMBERS - members), GROUP_SIZE=members, BLOCK_M=block_m, COLS=cols,
                            VEC=8, LANES_N=32, BITS=16, STAGES=STAGES, num_warps=warps)
    text = kernel.asm["ptx"]
    ops = re.findall(r"(?:^|\s)((?:cp\.async\.bulk|fence|ld\.global|st\.shared|st\.global)[\w.:]*)", text, re.M)
    first_bulk, first_proxy_fence = text.find("cp.async.bulk.tensor"), text.find("fence.proxy.async.global")
    full_wait = text.find("cp.async.bulk.wait_group 0; fence.proxy.async.global;")
    return {"ops": sorted(set(ops)), "bulk_stores": ops.count("cp.async.bulk.tensor.2d.global.shared::cta.bulk_group"),
            "st.global": sum(o.startswith("st.global") for o in ops), "shared_bytes": kernel.metadata.shared,
            "full_wait_before_release": 0 <= full_wait < text.rfind("fence.acq_rel.sys"),
            "proxy_fence_before_first_store": 0 <= first_proxy_fence < first_bulk}


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
        extra = {} if name.startswith("triton") else {"THREADS_PER_WARP": 32, "VEC": 8}
        out[name] = summary(launch_compile(kernel, ptr(torch.bfloat16), ptr(torch.bfloat16), 1 << 20, SYNC,
                                           GROUP_SIZE=4, HINT=16, BLOCK=BLOCK, num_warps=8, **extra))
    # upstream's layout: the block's BLOCK / (32 * num_warps) elements of a thread side by side (16 bf16: two
    # 16-byte vectors 16 bytes apart, each warp store spread over 1024 bytes)
    out["gluon_all_gather_wide"] = summary(launch_compile(_all_gather_gluon_kernel, ptr(torch.bfloat16),
                                                          ptr(torch.bfloat16), 1 << 20, SYNC, GROUP_SIZE=4, HINT=16,
                                                          BLOCK=BLOCK, THREADS_PER_WARP=32, VEC=BLOCK // 256,
                                                          num_warps=8))
    # rows, n, col_programs as the launcher passes them for a (4096, 4 * 4096) bf16 all_to_all
    out["gluon_all_to_all"] = summary(launch_compile(_all_to_all_gluon_kernel, ptr(torch.bfloat16),
                                                     ptr(torch.bfloat16), 4096, 4096, 3, SYNC, GROUP_SIZE=4, HINT=16,
                                                     BLOCK=BLOCK, THREADS_PER_WARP=32, VEC=8, num_warps=8))
    # the TMA all_gather at the GPU's bandwidth shape: 16384 bf16 a tile (64 x 256), 4 members, 8 warps
    out["tma_all_gather"] = tma_summary(4, *tile_shape(1 << 20, 16384, 2), 8)
    out["traced_put"] = {str(tracing): traced_ops(tracing) for tracing in (False, True)}
    # the compiled binary's cache key follows the device code the context reaches (IrisDeviceCtx.cache_key)
    store_hash = lambda: launch_source(gluon_store_kernel, IrisDeviceCtx, ptr(torch.int64), ptr(torch.float32),
                                       ptr(torch.float32), 3, BLOCK=BLOCK, HINT=None, num_warps=8)[0].hash()
    before, key = store_hash(), IrisDeviceCtx.cache_key
    IrisDeviceCtx.cache_key = key + "changed"
    out["context_key_in_kernel_hash"] = store_hash() != before
    IrisDeviceCtx.cache_key = key
    print("RESULT" + json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
