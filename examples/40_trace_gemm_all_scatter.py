"""Trace a GEMM + All-Scatter: when each SM computed each tile and when it sent it, on every rank.

``ctx.tracing.enable()`` gives the instrumented kernels a device buffer; ``ctx.ops.matmul_all_gather``
(the fused scatter of example 32) then records a "gemm tile" and a "scatter tile" event per tile, with the
GPU clock, the SM and the bytes sent. ``export`` merges every rank's events into one Chrome / Perfetto
trace on a common time axis: open it in ui.perfetto.dev, or pass ``--png`` for a picture (matplotlib).

    python examples/40_trace_gemm_all_scatter.py [--world-size 2] [--m 256 --n 128 --k 256]
        [--trace /tmp/iris_trace.json] [--png timeline.png]
"""

import argparse
import os
import tempfile

import torch

import iris
from iris.bench.report import plot_trace
from iris.ops import OpsConfig, reference

iris.set_logger_level(iris.INFO)  # the ranks print ctx.info lines as HH:MM:SS INFO [Iris] [rank/world] ...

SEED = 1234


def main(m, n, k, trace_path, png):
    ctx = iris.iris(heap_size=1 << 30 if iris.platform.backend.BACKEND != "cpu" else 1 << 24)
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    dev = ctx.get_device()
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    a = torch.randn(m, k, generator=torch.Generator().manual_seed(SEED)).to(dtype)
    bs = [torch.randn(k, n, generator=torch.Generator().manual_seed(SEED + 1 + r)).to(dtype) for r in range(world)]
    out = ctx.full((m, world * n), float("nan"), dtype=dtype)  # poison
    config = OpsConfig(variant="fused")

    ctx.ops.matmul_all_gather(out, a.to(dev), bs[rank].to(dev), config=config)  # compile before tracing
    ctx.tracing.enable(max_events=1 << 16)
    ctx.ops.matmul_all_gather(out, a.to(dev), bs[rank].to(dev), config=config)  # recorded
    written = ctx.tracing.export(trace_path)  # collective; rank 0 writes

    tolerance = 2e-2 if dtype == torch.bfloat16 else 1e-4
    torch.testing.assert_close(out.cpu().double(), reference.matmul_all_gather(a, bs), rtol=tolerance, atol=tolerance)
    events, dropped = ctx.tracing.events()
    kinds = {e["op"] for e in events}
    if len(kinds) != 2 or dropped or len(events) % 2:
        raise RuntimeError(f"rank {rank}: expected paired gemm/scatter events, got {len(events)} of kinds {kinds}")
    if rank == 0:
        if png:
            plot_trace(written, png)
        ctx.info(f"trace_gemm_all_scatter: {len(events) // 2} tiles traced per rank -> {written}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--m", type=int, default=256)
    parser.add_argument("--n", type=int, default=128)
    parser.add_argument("--k", type=int, default=256)
    parser.add_argument("--trace", default=os.path.join(tempfile.gettempdir(), "iris_trace.json"))
    parser.add_argument("--png", default=None)
    args = parser.parse_args()
    iris.run(main, args.world_size, args.m, args.n, args.k, args.trace, args.png)
