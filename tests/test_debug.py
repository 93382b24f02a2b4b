"""Debug mode (IRIS_DEBUG=1): out-of-heap addresses and out-of-range ranks stop the kernel with a message
naming the operation; a device wait that never completes reports who waited for whom. And when debug mode
is off, none of it is compiled (checked on the sm_90 PTX in test_compile.py)."""

import re
import time

import pytest
import torch
import triton
import triton.language as tl
from triton.experimental import gluon
from triton.experimental.gluon import language as gl

import iris
import iris.x  # noqa: F401  (iris.x.* in a kernel)
from conftest import on_gpu
from rank_utils import error_message, new_context

DEBUG_ENV = {"IRIS_DEBUG": "1", "IRIS_DEBUG_SPIN_LIMIT": "2000"}


@pytest.fixture(scope="module")
def debug_pool():
    pool = iris.RankPool(2, env=DEBUG_ENV)
    yield pool
    pool.close()


@triton.jit
def _peer_load_kernel(src, dst, n, heap_bases, rank, peer, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst + offs, iris.load(src + offs, rank, peer, heap_bases, mask=mask), mask=mask)


@triton.jit
def _peer_store_kernel(dst, heap_bases, rank, peer, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    iris.store(dst + offs, offs, rank, peer, heap_bases)


def _debug_body():
    ctx = new_context(heap_size=1 << 16)
    rank, peer = ctx.get_rank(), 1 - ctx.get_rank()
    bases = ctx.get_heap_bases()
    on_heap = ctx.arange(64, dtype=torch.int32)
    local = torch.zeros(64, dtype=torch.int32)
    ctx.barrier()  # the peer's on_heap is filled before we read it
    results = {}
    # In bounds, with a mask that hides lanes past n: no complaint, right values.
    _peer_load_kernel[(1,)](on_heap, local, 50, bases, rank, peer, BLOCK=64)
    results["ok"] = torch.equal(local[:50], torch.arange(50, dtype=torch.int32))
    # A pointer that is not on the heap (a plain torch tensor) used as a remote address.
    results["off_heap"] = error_message(lambda: _peer_load_kernel[(1,)](local, local, 64, bases, rank, peer, BLOCK=64))
    # A rank outside [0, world_size).
    results["bad_rank"] = error_message(lambda: _peer_store_kernel[(1,)](on_heap, bases, rank, 5, BLOCK=64))
    ctx.barrier()
    return results


@pytest.mark.skipif(on_gpu(), reason="on GPUs a device assert ends the process's CUDA context: see the GPU form")
def test_debug_mode_checks_addresses_and_ranks(debug_pool):
    for r in debug_pool.run(_debug_body):
        assert r["ok"]
        assert "iris.load: address outside the target rank's symmetric heap (IRIS_DEBUG)" in r["off_heap"]
        assert "iris.store: a rank argument is outside [0, world_size) (IRIS_DEBUG)" in r["bad_rank"]


@triton.jit
def _gated_put_kernel(src, dst, gate, heap_bases, rank, peer):
    iris.wait_then_put_rect(src, dst, rank, peer, heap_bases, None, gate, 1, 16, 1, 16, 16)  # nobody raises gate


@triton.jit
def _spinlock_kernel(x, out, locks, context, M: tl.constexpr, N: tl.constexpr, RANK: tl.constexpr,
                     WORLD_SIZE: tl.constexpr):
    dctx = iris.DeviceContext.initialize(context, RANK, WORLD_SIZE)
    view = iris.x.make_tensor_view(out, M, N, N, 1)
    tile = iris.x.Tile(0, 0, M, N, tl.load(x + tl.arange(0, M)[:, None] * N + tl.arange(0, N)[None, :]))
    iris.x.all_reduce_spinlock(tile, view, locks, dctx)


def _unending_waits_body():
    """Waits no rank ends: a gate nobody raises, a spinlock whose turn never comes (the lock holds a rank that is
    not in the job). Each rank's own; each must stop the kernel in debug mode, naming itself."""
    ctx = new_context(heap_size=1 << 16)
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    src, dst, gate = ctx.ones(4), ctx.zeros(4), ctx.zeros(1, dtype=torch.int32)
    locks = ctx.full((1,), 7, dtype=torch.int32)
    x, out = ctx.ones(8, 16), ctx.zeros(8, 16)
    return {
        "gate": error_message(lambda: _gated_put_kernel[(1,)](src, dst, gate, ctx.get_heap_bases(), rank, rank)),
        "turn": error_message(lambda: _spinlock_kernel[(1,)](x, out, locks, ctx.get_device_context(), 8, 16, rank,
                                                             world)),
    }


@pytest.mark.skipif(on_gpu(), reason="on GPUs a device assert ends the process's CUDA context: see the GPU form")
def test_debug_mode_bounds_the_gate_and_spinlock_waits(debug_pool):
    for r in debug_pool.run(_unending_waits_body):
        assert "iris.wait_then_put_rect: device wait timed out" in r["gate"], r["gate"]
        assert "iris.x.all_reduce_spinlock: device wait timed out" in r["turn"], r["turn"]


@gluon.jit
def _gluon_load_kernel(IrisDeviceCtx: gl.constexpr, context_tensor, src, dst, peer, BLOCK: gl.constexpr):
    ctx = IrisDeviceCtx.initialize(context_tensor)
    offs = gl.arange(0, BLOCK, layout=gl.BlockedLayout([BLOCK // 32], [32], [1], [0]))
    gl.store(dst + offs, ctx.load(src + offs, peer))


def _gluon_debug_body():
    from iris.gluon import IrisDeviceCtx

    ctx = new_context(heap_size=1 << 16)
    peer = 1 - ctx.get_rank()
    local = torch.zeros(64, dtype=torch.int32)
    on_heap = ctx.arange(64, dtype=torch.int32)
    ctx.barrier()
    _gluon_load_kernel[(1,)](IrisDeviceCtx, ctx.get_device_context(), on_heap, local, peer, BLOCK=64, num_warps=1)
    ok = torch.equal(local, torch.arange(64, dtype=torch.int32))
    off_heap = error_message(lambda: _gluon_load_kernel[(1,)](IrisDeviceCtx, ctx.get_device_context(), local, local,
                                                              peer, BLOCK=64, num_warps=1))
    ctx.barrier()
    return ok, off_heap


@pytest.mark.skipif(on_gpu(), reason="on GPUs a device assert ends the process's CUDA context: see the GPU form")
def test_debug_mode_checks_gluon_kernels_the_same_way(debug_pool):
    for ok, off_heap in debug_pool.run(_gluon_debug_body):
        assert ok and "iris.load: address outside the target rank's symmetric heap (IRIS_DEBUG)" in off_heap


def _skipped_barrier_body(done):
    """Rank 1 skips the barrier but stays in its function until rank 0's wait has given up (``done`` appears): a
    rank that returned would end the wait sooner, as a ``PeerError`` naming it, whichever came first under load."""
    import os

    ctx = new_context(heap_size=1 << 16)
    if ctx.get_rank() == 1:
        deadline = time.monotonic() + 120
        while not os.path.exists(done) and time.monotonic() < deadline:
            time.sleep(0.01)
        return "skipped"
    message = error_message(lambda: ctx.device_barrier())
    open(done, "w").close()
    return message


@pytest.mark.skipif(on_gpu(), reason="on GPUs a device assert ends the process's CUDA context")
def test_debug_mode_reports_a_wait_that_never_completes(debug_pool, capfd, tmp_path):
    results = debug_pool.run(_skipped_barrier_body, str(tmp_path / "done"))
    assert results[1] == "skipped"
    assert "iris.barrier: device wait timed out (IRIS_DEBUG): its flag never reached the value waited for" in results[0]


# On GPUs a device assert ends the CUDA context of the process that hit it, so the GPU check runs the
# faulty kernel in a fresh program and reads what the device printed.
_GPU_SCRIPT = """
import torch
import iris
import test_debug

def main():
    ctx = iris.iris(heap_size=1 << 16, debug=True)
    local = torch.zeros(64, dtype=torch.int32, device=ctx.get_device())
    test_debug._peer_load_kernel[(1,)](local, local, 64, ctx.get_heap_bases(), ctx.get_rank(), 1 - ctx.get_rank(),
                                       BLOCK=64)
    torch.cuda.synchronize()

def skip_barrier():
    ctx = iris.iris(heap_size=1 << 16, debug=True)
    if ctx.get_rank() == 0:
        ctx.device_barrier()
        torch.cuda.synchronize()

if __name__ == "__main__":
    iris.run(skip_barrier if "skip" in __file__ else main, 2)
"""


@pytest.mark.skipif(not on_gpu(), reason="GPU forms of the two tests above")
@pytest.mark.parametrize("case,message", [
    ("faulty", "iris.load: address outside the target rank's symmetric heap"),
    ("skip", "iris.barrier: device wait timed out"),
])
def test_debug_mode_device_assert_on_gpu(tmp_path, case, message):
    import os
    import subprocess
    import sys

    script = tmp_path / f"{case}.py"
    script.write_text(_GPU_SCRIPT)
    env = dict(os.environ, IRIS_DEBUG_SPIN_LIMIT="100000",
               PYTHONPATH=os.pathsep.join([os.path.dirname(__file__), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    output = proc.stdout + proc.stderr
    assert proc.returncode != 0, output[-3000:]
    assert message in output, output[-3000:]


_COMPILE_AFTER_ENABLE = """
import sys
import iris, triton
import test_debug
from iris.iris import enable_debug
from triton.backends.compiler import GPUTarget
enable_debug()  # what iris.iris(debug=True) calls, after the kernels' modules were imported
sig = {"src": "*i32", "dst": "*i32", "n": "i32", "heap_bases": "*i64", "rank": "i32", "peer": "i32",
       "BLOCK": "constexpr"}
src = triton.compiler.ASTSource(fn=test_debug._peer_load_kernel, signature=sig, constexprs={"BLOCK": 64})
kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32), options={"debug": True})
print("ASSERT", "__assertfail" in kernel.asm["ptx"])
"""


def test_debug_switch_at_runtime_reaches_translate():
    """``debug=True`` flips debug mode after import: the address checks must be compiled into kernels built
    from then on (checked on the sm_90 PTX, no GPU needed)."""
    import os
    import subprocess
    import sys

    env = dict(os.environ, IRIS_BACKEND="cuda",
               PYTHONPATH=os.pathsep.join([os.path.dirname(__file__), os.environ.get("PYTHONPATH", "")]))
    env.pop("TRITON_INTERPRET", None)
    env.pop("IRIS_DEBUG", None)
    proc = subprocess.run([sys.executable, "-c", _COMPILE_AFTER_ENABLE], env=env, capture_output=True, text=True,
                          timeout=300)
    assert "ASSERT True" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-3000:]


_WAITS_FOR_ITSELF = """
import torch

import iris  # first: on the cpu backend it readies Triton's interpreter
import triton
import triton.language as tl


@triton.jit
def waits_for_program_1(flag, rank, heap_bases):
    if tl.program_id(0) == 0:
        iris.wait_until(flag, 1, rank, rank)  # program 1 raises it, and on the cpu backend runs after program 0
    else:
        iris.atomic_add(flag, 1, rank, rank, heap_bases, sem="release", scope="sys")


def main():
    ctx = iris.iris(1 << 20)
    flag = ctx.zeros(1, dtype=torch.int32)
    waits_for_program_1[(2,)](flag, ctx.get_rank(), ctx.get_heap_bases())


if __name__ == "__main__":
    iris.run(main, 1)
"""


@pytest.mark.skipif(on_gpu(), reason="the cpu backend's notice (a GPU runs both programs side by side)")
def test_a_kernel_that_waits_for_a_later_program_is_named(tmp_path):
    import os
    import subprocess
    import sys

    script = tmp_path / "waits_for_itself.py"
    script.write_text(_WAITS_FOR_ITSELF)
    env = dict(os.environ, IRIS_BACKEND="cpu", IRIS_NOTICE_S="1", IRIS_DEBUG="1", IRIS_DEBUG_SPIN_LIMIT="4000")
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0, proc.stderr[-3000:]  # debug mode ends the wait
    assert re.search(r"WARNING \[Iris\] \[0/1\] waits_for_program_1: program 0 of 2 has polled the word at 0x[0-9a-f]+ "
                     r"for \d+ s and it still reads 0\. If it waits for another program of this launch, it never will",
                     proc.stderr), proc.stderr[-3000:]
    assert "iris.wait_until: device wait timed out (IRIS_DEBUG)" in proc.stderr, proc.stderr[-3000:]
