"""One-shot all_reduce latency on one GPU (bf16; CUDA-graph replay of a batch of calls, and eager calls back to back,
each the median of the batches), at world size 1 or with ranks sharing the GPU (``IRIS_BACKEND=simulation``, where
the ranks' kernels are time-sliced, so the figure is the driver's switching more than the kernel). Run it once per
tree to compare two versions: ``python scripts/all_reduce_latency.py TAG [WORLD_SIZE]`` (``PYTHONPATH`` picks the
tree; ``LATENCY_SIZES=8192,65536`` the sizes in bytes)."""

import os
import sys

import torch

import iris
from iris.ccl import CollectiveConfig

ONE_SHOT = CollectiveConfig(algorithm="one_shot")


def main(tag, world_size):
    ctx = iris.iris(heap_size=1 << 26)
    calls, batches = (100, 20) if world_size == 1 else (10, 5)
    sizes = [int(v) for v in os.environ.get("LATENCY_SIZES", "8192,65536,262144,1048576").split(",")]
    for nbytes in sizes:
        n = nbytes // 2
        inp = ctx.randn(n, dtype=torch.bfloat16)
        out = ctx.empty(n, dtype=torch.bfloat16)
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            for _ in range(3):
                ctx.ccl.all_reduce(out, inp, config=ONE_SHOT)
        torch.cuda.synchronize()
        ctx.barrier()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(calls):
                ctx.ccl.all_reduce(out, inp, config=ONE_SHOT)
        graph.replay()
        torch.cuda.synchronize()
        times = []
        for _ in range(batches):
            ctx.barrier()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1000 / calls)
        times.sort()
        eager = []
        for _ in range(batches):
            ctx.barrier()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(calls):
                ctx.ccl.all_reduce(out, inp, config=ONE_SHOT)
            end.record()
            end.synchronize()
            eager.append(start.elapsed_time(end) * 1000 / calls)
        eager.sort()
        if world_size == 1:
            assert torch.equal(out, inp), "world-size-1 all_reduce is not the input"
        if ctx.get_rank() == 0:
            print(f"LAT {tag} all_reduce one_shot bf16 {nbytes} B world {world_size}: {times[len(times) // 2]:.2f} us "
                  f"(min {times[0]:.2f}) graphed, {eager[len(eager) // 2]:.2f} us (min {eager[0]:.2f}) eager",
                  flush=True)


if __name__ == "__main__":
    world = int(sys.argv[2]) if len(sys.argv) > 2 else 1
    iris.run(main, world, sys.argv[1], world)
