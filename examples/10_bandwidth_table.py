"""10: a small bandwidth table: load, store, all-load, all-store, atomic add and atomic xchg through iris.

    python examples/10_bandwidth_table.py               # every GPU, 64 MiB per rank
    python examples/10_bandwidth_table.py --bytes 16384 # tiny (the default on the cpu backend)

Uses the benchmark harness (``iris.bench``): each row is timed after a host barrier, with CUDA events
(CUDA-graph replay for short operations), and reports the slowest rank's median. load/store and the
atomics run from rank 0 on rank 1; all-load/all-store run on every rank at once. For the comparison
with the copy engine and a raw-pointer Triton kernel, run ``benchmarks/run_all.py``.
"""

import argparse
import os

import iris
from iris.bench import micro, report
from iris.bench.suite import default_world_size

iris.set_logger_level(iris.INFO)  # the ranks print ctx.info lines as HH:MM:SS INFO [Iris] [rank/world] ...


def main(nbytes, quick):
    timing = micro.QUICK.timing if quick else micro.FULL.timing
    profile = micro.Profile(sizes=(nbytes,), matrix_bytes=nbytes, atomic_sizes=(nbytes,), pingpong_rounds=1,
                            timing=timing, rotate_bytes=nbytes if quick else None)
    world_size = int(os.environ["WORLD_SIZE"])  # set by iris.run and by torchrun
    ctx = iris.iris(heap_size=profile.heap_bytes(world_size))
    bufs = micro.Buffers(ctx, profile)  # collective: heap and local buffers, allocated once

    rows = micro.p2p_curve(bufs, ops=("load", "store"), providers=("iris",), progress=False)
    rows += micro.all_sweep(bufs, providers=("iris",), progress=False)
    rows += micro.atomic_sweep(bufs, ops=("atomic_add", "atomic_xchg"), providers=("iris",), progress=False)
    if ctx.get_rank() == 0:
        print(report.format_table(rows, columns=("op", "variant", "bytes", "ms_p50", "busbw_GBps", "timing"),
                                  title=f"iris on {report.environment(ctx.get_device())['gpu']} x {world_size}"))
        ctx.info(f"bandwidth_table: {len(rows)} rows")
    ctx.barrier()
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bytes", type=int, default=None, help="bytes per rank (a power of two)")
    parser.add_argument("--world-size", type=int, default=None, help="ranks (default: every GPU; 2 on the cpu)")
    args = parser.parse_args()
    on_cpu = iris.platform.backend.BACKEND == "cpu"
    nbytes = args.bytes or (16 << 10 if on_cpu else 64 << 20)
    iris.run(main, args.world_size or default_world_size(), nbytes, on_cpu or nbytes <= 1 << 20)
