"""The host path of eager calls alone, on any backend: what is timed is ours (keys, routes, checks, the Work, torch's
dispatch, the copy engine's Python), not the device's.

    PYTHONPATH=$PWD python benchmarks/host_path_stubbed.py        # the cpu backend, world size 1

- collectives, the fused ops (their launch on the SMs) and the torch bindings: every remembered launch's C launcher
  replaced by a function that does nothing;
- copy-engine puts: every lane a CUDA lane (``iris/host/copy_engine/lanes.py``) over a null stream, and the driver a
  library of functions that return at once (compiled here with ``cc``; without a compiler, Python functions that do
  nothing, which leaves out the ctypes calls), so a put runs the Python and the ctypes calls it runs on GPUs;
- allocation: ``ctx.empty`` as it is (the heap is host memory on the cpu backend; nothing is launched);
- the cpu backend's scan of the barriers' mismatch records after every call (``GroupTable.check``; GPUs leave it
  to the watchdog) switched off, as GPUs run the path.

us per call, the best of 7 medians of 1000 calls, each row beside its anchor in the same run (``torch.empty``,
gloo's all_reduce, ``Tensor.copy_``); ``put_tiles`` per tile, against the 3 us a tile it is held to on an H200 host.
"""

import ctypes
import os
import subprocess
import tempfile
import time
import types

import torch
import torch.distributed as dist

import iris
import iris.compile as iris_compile
import iris.distributed as iris_distributed
from iris.ops import OpsConfig
from iris.copy_engine import Tile
from iris.host.copy_engine import lanes
from iris.platform import cuda_driver, private

TILES = 64  # of 128 x 128 fp32 (64 KiB each), one put_tiles


def _median_us(fn, count=1000, rounds=7):
    for _ in range(50):
        fn()
    best = float("inf")
    for _ in range(rounds):
        times = []
        for _ in range(count):
            began = time.perf_counter()
            fn()
            times.append(time.perf_counter() - began)
        best = min(best, sorted(times)[count // 2] * 1e6)
    return best


def _nothing(*args, **kwargs):
    return 0


def _stub_launches(ctx):
    """Every stored launch takes its direct path, into a launcher that does nothing."""
    fake = (_nothing, (None,) * 9, 1, 1, 1)
    for entry in ctx.launches._entries.values():
        launch = entry[0]
        launch._direct, launch._device, launch._tail = fake, "stub", launch._tail or (None,) * 8
    private.current_device = lambda: "stub"
    private.no_launch_hooks = lambda: True
    private.current_stream = lambda device: 0


# the driver entry points a put reaches, as exported by libcuda (versioned names where the driver has them)
_DRIVER_SYMBOLS = ("cuMemcpyAsync", "cuMemcpy2DAsync_v2", "cuMemcpy3DBatchAsync_v2", "cuEventCreate",
                   "cuEventDestroy_v2", "cuEventRecord", "cuStreamWaitEvent", "cuStreamWaitValue32_v2",
                   "cuStreamWaitValue64_v2", "cuStreamWriteValue32_v2", "cuGetErrorString")


class _NullDriver:
    """``cuda_driver`` for the CUDA lanes: every call does nothing and returns 0 (no error, a null handle)."""

    def __getattr__(self, name):
        return _nothing


def _null_libcuda():
    """A shared library whose every ``_DRIVER_SYMBOLS`` entry returns 0 at once, or None without a C compiler."""
    folder = tempfile.mkdtemp(prefix="iris-null-cuda-")
    source, library = os.path.join(folder, "null.c"), os.path.join(folder, "libcuda_null.so")
    with open(source, "w") as f:
        f.write("".join(f"int {name}() {{ return 0; }}\n" for name in _DRIVER_SYMBOLS))
    try:
        subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", library, source], check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return ctypes.CDLL(library)


def _stub_lanes(ctx):
    """Every copy-engine lane of ``ctx`` a ``CudaLane`` over a null stream and a null driver, never capturing.
    Returns what stands in for the driver."""
    engines, stream = ctx.copy_engines, torch.cuda.Stream
    library = _null_libcuda()
    if library is None:
        lanes.cuda_driver = _NullDriver()
    else:
        cuda_driver._lib = library
    lanes.CudaLane.capturing = staticmethod(lambda: False)
    torch.cuda.Stream = lambda device=None: types.SimpleNamespace(cuda_stream=0, query=lambda: True)
    try:
        for key in engines.lanes:
            engines.lanes[key] = lanes.CudaLane(ctx, signal=types.SimpleNamespace(check=_nothing, launch=_nothing))
    finally:
        torch.cuda.Stream = stream
    return "Python functions that do nothing (no C compiler)" if library is None else "a C library of no-ops"


def main():
    ctx = iris.iris(heap_size=1 << 30, engines=("ce",))
    iris_compile.set_context(ctx)
    iris_distributed.set_context(ctx)
    group = dist.new_group(backend="iris")
    n, dtype = 4096, torch.bfloat16  # 8 KiB
    inp, out = ctx.empty(n, dtype=dtype).normal_(), ctx.empty(n, dtype=dtype)
    piece, plain = torch.empty(n, dtype=dtype), torch.randn(n, dtype=dtype)
    calls = {
        "ctx.ccl.all_reduce 8 KiB": lambda: ctx.ccl.all_reduce(out, inp),
        "ctx.ccl.reduce_scatter 8 KiB": lambda: ctx.ccl.reduce_scatter(piece, inp),
        "ctx.ccl.all_gather 8 KiB": lambda: ctx.ccl.all_gather(out, inp),
        "dist.all_reduce, iris backend": lambda: dist.all_reduce(plain, group=group),
        "torch.ops.iris.all_reduce": lambda: torch.ops.iris.all_reduce(plain),
    }
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    fused = OpsConfig(variant="fused", copy_engine=False, block_m=32, block_n=32, block_k=32)
    heap_out, plain_out = ctx.empty(64, 64), torch.empty(64, 64)
    fused_calls = {  # 64 x 64 x 64 fp32: the matmul anchor's own time is small beside a host path
        "ctx.ops.matmul_all_gather 64^3": lambda: ctx.ops.matmul_all_gather(heap_out, a, b, config=fused),
        "ctx.ops.all_gather_matmul 64^3": lambda: ctx.ops.all_gather_matmul(plain_out, a, b, config=fused),
        "ctx.ops.matmul_all_reduce 64^3": lambda: ctx.ops.matmul_all_reduce(heap_out, a, b, config=fused),
        "ctx.ops.matmul_reduce_scatter 64^3": lambda: ctx.ops.matmul_reduce_scatter(plain_out, a, b, config=fused),
    }
    calls.update(fused_calls)
    for fn in calls.values():  # compile and remember
        fn()
        fn()
    _stub_launches(ctx)
    driver = _stub_lanes(ctx)
    ctx.groups.on_mismatch = None  # what GPUs do per call (the module docstring)
    rows = [(name, _median_us(fn), "dist.all_reduce, gloo (real)" if "all_reduce" in name else "", None)
            for name, fn in calls.items() if name not in fused_calls]
    gloo = _median_us(lambda: dist.all_reduce(plain))
    rows = [(name, us, anchor, gloo if anchor else None) for name, us, anchor, _ in rows]
    matmul = _median_us(lambda: torch.matmul(a, b, out=plain_out))
    rows += [(name, _median_us(fn), "torch.matmul 64^3 (real)", matmul) for name, fn in fused_calls.items()]
    for nbytes, label in ((1 << 10, "1 KiB"), (1 << 20, "1 MiB"), (64 << 20, "64 MiB")):
        rows.append((f"ctx.empty {label}", _median_us(lambda: ctx.empty(nbytes, dtype=torch.uint8)),
                     f"torch.empty {label}", _median_us(lambda: torch.empty(nbytes, dtype=torch.uint8))))
    src, dst = ctx.empty(4096, dtype=torch.uint8).random_(0, 255), ctx.empty(4096, dtype=torch.uint8)
    plain_src, plain_dst = src.clone(), torch.empty_like(src)
    rows.append(("ctx.put 4 KiB", _median_us(lambda: ctx.put(src, 0, dst, async_op=True)),
                 "Tensor.copy_ 4 KiB", _median_us(lambda: plain_dst.copy_(plain_src))))
    a = ctx.empty(8 * 128, 8 * 128, dtype=torch.float32)
    pitch = a.stride(0) * a.element_size()
    tiles = [Tile(m, k, 128, 128, 4, pitch, a.data_ptr()) for m in range(8) for k in range(8)]
    targets, pitches = [iris.copy_engine.peer_address(ctx, a, 0)] * TILES, [pitch] * TILES
    tiles_us = _median_us(lambda: ctx.put_tiles(tiles, 0, targets, pitches, async_op=True), count=200)
    rows.append((f"ctx.put_tiles, a tile of {TILES}", tiles_us / TILES, "target on an H200 host", 3.0))
    return driver, rows


if __name__ == "__main__":
    driver, rows = iris.run(main, 1)[0]
    print(f"copy-engine driver calls: {driver}")
    print(f"{'call':<34} {'us':>8}   {'anchor':<30} {'us':>8}")
    for name, us, anchor, anchor_us in rows:
        print(f"{name:<34} {us:8.2f}   {anchor:<30} {'' if anchor_us is None else f'{anchor_us:8.2f}'}")
