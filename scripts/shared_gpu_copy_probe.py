"""Do the copy queue's operations progress while a kernel's programs fill every SM and spin? (one NVIDIA GPU)

The fused ops' copy-engine path has a kernel spin on a flag that a side stream raises after a
``cuStreamWaitValue32`` on a count the kernel raises, a ``cuMemcpy2DAsync`` and a ``cuStreamWriteValue32``.
That is safe only if none of the three needs an SM. Here a spinning kernel takes every thread slot of every
SM (``--grid full``) or leaves two SMs' worth free (``spare``), raises the count, and spins on the flag for at
most ``--timeout-ms``; the side stream then runs: wait for the count, one copy (none, a 1-D
``cudaMemcpyAsync``, a contiguous 2-D copy, a strided 2-D copy), write the flag. Each case prints whether
every program saw the flag and how long the kernel ran.

Cases: in one process, copies within it; and two ranks of the simulation backend on the one GPU (two
processes, two contexts), each rank's side stream copying into the peer's heap and raising the peer's flag,
as the fused ops do when ranks share a GPU.

    python scripts/shared_gpu_copy_probe.py [--timeout-ms 2000]
"""

import argparse
import os
import time

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
os.environ.setdefault("NVSHMEM_DISABLE_NVLS", "1")

import torch
import triton
import triton.language as tl

COPIES = ("none", "memcpy_1d", "copy_2d_contiguous", "copy_2d_strided")
ROWS, ROW_BYTES, PITCH = 256, 4096, 8192  # the 2-D copies: 1 MiB, strided rows like a band of tile columns
WARPS = 32  # two programs of 1024 threads fill an SM's 2048 thread slots


@triton.jit
def _spin(count, flag, seen, timeout_ns):
    start = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)
    tl.atomic_add(count, 1, sem="release", scope="sys")
    v = tl.atomic_add(flag, 0, sem="acquire", scope="sys")
    now = start
    while (v == 0) & (now - start < timeout_ns):
        v = tl.atomic_add(flag, 0, sem="acquire", scope="sys")
        now = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False,
                                        pack=1)
    tl.store(seen + tl.program_id(0), v)


def _grid(kind):
    sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    return 2 * sms if kind == "full" else 2 * sms - 4


def _queue_copy(kind, stream, dst, src):
    """One copy of ``kind`` from ``src`` to ``dst`` (uint8 buffers of ROWS * PITCH bytes) on ``stream``."""
    from iris.platform import cuda_driver

    if kind == "memcpy_1d":
        with torch.cuda.stream(stream):
            dst[:ROWS * ROW_BYTES].copy_(src[:ROWS * ROW_BYTES])
    elif kind == "copy_2d_contiguous":
        cuda_driver.copy_2d(dst.data_ptr(), ROW_BYTES, src.data_ptr(), ROW_BYTES, ROW_BYTES, ROWS, stream.cuda_stream)
    elif kind == "copy_2d_strided":
        cuda_driver.copy_2d(dst.data_ptr(), PITCH, src.data_ptr(), PITCH, ROW_BYTES, ROWS, stream.cuda_stream)


def _case(grid_kind, copy_kind, count, flag, peer_flag, dst, src, side, timeout_ms, barrier):
    """Launch the spinning kernel on our ``flag``, then queue on ``side``: wait until every program has raised
    ``count``, copy into ``dst``, write 1 into ``peer_flag`` (our own flag in one process, the peer's in two,
    which ``barrier`` keeps from starting before ours is cleared)."""
    from iris.platform import cuda_driver

    grid = _grid(grid_kind)
    seen = torch.full((grid,), -1, dtype=torch.int32, device="cuda")
    count.zero_()
    flag.zero_()
    torch.cuda.synchronize()
    barrier()
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    _spin[(grid,)](count, flag, seen, int(timeout_ms * 1e6), num_warps=WARPS)
    end.record()
    cuda_driver.stream_wait_at_least(side.cuda_stream, count.data_ptr(), grid)
    _queue_copy(copy_kind, side, dst, src)
    cuda_driver.stream_write(side.cuda_stream, peer_flag.data_ptr(), 1)
    torch.cuda.synchronize()
    return {"grid": f"{grid_kind} ({grid} x {WARPS} warps)", "copy": copy_kind,
            "saw_flag": int((seen == 1).sum()), "programs": grid, "kernel_ms": round(begin.elapsed_time(end), 3)}


def one_process(timeout_ms):
    torch.cuda.init()
    count = torch.zeros(1, dtype=torch.int32, device="cuda")
    flag = torch.zeros(1, dtype=torch.int32, device="cuda")
    src = torch.randint(0, 255, (ROWS * PITCH,), dtype=torch.uint8, device="cuda")
    dst = torch.zeros_like(src)
    side = torch.cuda.Stream()
    _spin[(1,)](count, flag, torch.empty(1, dtype=torch.int32, device="cuda"), 0, num_warps=WARPS)  # compile
    rows = []
    for grid_kind in ("spare", "full"):
        for copy_kind in COPIES:
            rows.append({"where": "one process", **_case(grid_kind, copy_kind, count, flag, flag, dst, src, side,
                                                          timeout_ms, lambda: None)})
            print(rows[-1], flush=True)
    return rows


def two_ranks(timeout_ms):
    """On a rank of the simulation backend: each rank spins on its own flag, its side stream copies into the
    peer's heap and raises the peer's flag."""
    import iris
    from iris.host.memory.peers import peer_view

    ctx = iris.iris(1 << 26)
    peer = 1 - ctx.get_rank()
    count = ctx.zeros(1, dtype=torch.int32)
    flag = ctx.zeros(1, dtype=torch.int32)
    dst = ctx.zeros(ROWS * PITCH, dtype=torch.uint8)
    src = torch.randint(0, 255, (ROWS * PITCH,), dtype=torch.uint8, device=ctx.get_device())
    side = torch.cuda.Stream(ctx.get_device())
    _spin[(1,)](count, flag, torch.empty(1, dtype=torch.int32, device=ctx.get_device()), 0, num_warps=WARPS)
    rows = []
    for grid_kind in ("spare", "full"):
        for copy_kind in COPIES:
            row = _case(grid_kind, copy_kind, count, flag, peer_view(ctx, flag, peer), peer_view(ctx, dst, peer),
                        src, side, timeout_ms, ctx.barrier)
            rows.append({"where": f"rank {ctx.get_rank()} of 2 on one GPU", **row})
            ctx.barrier()  # both are done before either clears its flag for the next case
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout-ms", type=float, default=2000.0)
    parser.add_argument("--skip-two-ranks", action="store_true")
    args = parser.parse_args()
    rows = one_process(args.timeout_ms)
    if not args.skip_two_ranks:
        from iris.host.launcher import launch

        for rank_rows in launch(two_ranks, 2, args.timeout_ms, backend="simulation", timeout_s=300):
            rows.extend(rank_rows)
    print(f"\n{'where':<26} {'grid':<22} {'copy':<20} {'saw flag':>12} {'kernel ms':>10}")
    for row in rows:
        print(f"{row['where']:<26} {row['grid']:<22} {row['copy']:<20} {row['saw_flag']:>5} of {row['programs']:<4}"
              f" {row['kernel_ms']:>10}")


if __name__ == "__main__":
    t0 = time.time()
    main()
    print(f"({time.time() - t0:.0f} s)")
