"""all_reduce latency at world size 1 (bf16, CUDA-graph replay of 100 calls, median of 20): the local cost of the
opening barrier's polls. Run it once per tree to compare two versions:
``python scripts/all_reduce_world1_latency.py TAG``."""

import sys

import torch

import iris


def main(tag):
    ctx = iris.iris(heap_size=1 << 26)
    for nbytes in (8192, 65536, 1 << 20):
        n = nbytes // 2
        inp = ctx.randn(n, dtype=torch.bfloat16)
        out = ctx.empty(n, dtype=torch.bfloat16)
        side = torch.cuda.Stream()
        with torch.cuda.stream(side):
            for _ in range(3):
                ctx.ccl.all_reduce(out, inp)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(100):
                ctx.ccl.all_reduce(out, inp)
        graph.replay()
        torch.cuda.synchronize()
        times = []
        for _ in range(20):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            graph.replay()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) * 1000 / 100)
        times.sort()
        assert torch.allclose(out.float(), inp.float()), "world-size-1 all_reduce is not the input"
        print(f"LAT {tag} all_reduce bf16 {nbytes} B world 1: {times[10]:.2f} us (min {times[0]:.2f})", flush=True)


if __name__ == "__main__":
    iris.run(main, 1, sys.argv[1])
