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
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, tma

from iris.ccl.gluon.all_gather import _all_gather_gluon_kernel
from iris.ccl.gluon.all_to_all import _all_to_all_gluon_kernel
from iris.device.translate import translate
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


@gluon.jit
def tma_put_kernel(out, inp, rows, cols, heap_bases, rank, peer, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr):
    """A [BLOCK_M, BLOCK_N] bf16 tile to the peer's heap with one TMA bulk copy from shared memory, through a
    descriptor made on the device over the translated address (the Hopper path past upstream, compiled only)."""
    layout: gl.constexpr = gl.BlockedLayout([1, 8], [4, 8], [gl.num_warps(), 1], [1, 0])
    smem_layout: gl.constexpr = gl.NVMMASharedLayout.get_default_for([BLOCK_M, BLOCK_N], gl.bfloat16)
    offs_m = gl.program_id(0) * BLOCK_M + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, layout))
    offs_n = gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, layout))
    x = gl.load(inp + offs_m[:, None] * cols + offs_n[None, :])  # [BLOCK_M, BLOCK_N]
    smem = gl.allocate_shared_memory(gl.bfloat16, [BLOCK_M, BLOCK_N], smem_layout, x)
    fence_async_shared()  # the generic-proxy stores to shared memory, before the async proxy reads them
    remote = translate(out, rank, peer, heap_bases, None, None, "tma_put")
    desc = tma.make_tensor_descriptor(remote, [rows, cols], [cols, 1], [BLOCK_M, BLOCK_N], smem_layout)
    tma.async_copy_shared_to_global(desc, [gl.program_id(0) * BLOCK_M, 0], smem)
    # Triton 3.6's tma.store_wait(0) is cp.async.bulk.wait_group.read: the shared source may be reused, but the
    # writes need not be complete; a peer's flag may only be released after the full wait
    gl.inline_asm_elementwise("cp.async.bulk.wait_group 0; mov.u32 $0, 0;", "=r", [], dtype=gl.int32,
                              is_pure=False, pack=1)


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
    tma_ptx = launch_compile(tma_put_kernel, ptr(torch.bfloat16), ptr(torch.bfloat16), 4096, 128, ptr(torch.int64),
                             3, 2, BLOCK_M=64, BLOCK_N=128, num_warps=4).asm["ptx"]
    out["tma_put"] = sorted(set(re.findall(r"(?:^|\s)((?:cp\.async\.bulk|fence|tensormap\.cp)[\w.:]*)", tma_ptx)))
    print("RESULT" + json.dumps(out))


if __name__ == "__main__":
    sys.exit(main())
