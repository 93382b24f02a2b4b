"""``ctx.ccl.all_reduce``: every rank ends with the sum (or max, min, avg) of every rank's tensor.

Runs both algorithms, one-shot (every rank reads every peer's whole input: least latency) and two-shot
(reduce-scatter, then all-gather: each byte crosses a link once per peer), plus the in-place form, and
checks each against a float64 reference. The input must be on the symmetric heap: peers read it.

    python examples/20_all_reduce.py [--world-size 2] [--n 100000]
"""

import argparse

import torch

import iris  # before triton: on the cpu backend this switches Triton to its interpreter
from iris.ccl import CollectiveConfig, reference

iris.set_logger_level(iris.INFO)  # the ranks print ctx.info lines as HH:MM:SS INFO [Iris] [rank/world] ...

SEED = 1234


def main(n):
    ctx = iris.iris(heap_size=8 * n * 4 + (1 << 20))
    rank, world_size = ctx.get_rank(), ctx.get_num_ranks()
    inputs = [torch.randn(n, generator=torch.Generator().manual_seed(SEED + r)) for r in range(world_size)]
    inp = ctx.empty(n)
    out = ctx.empty(n)
    inp.copy_(inputs[rank])
    ref = reference.all_reduce(inputs, "sum")
    for algorithm in ("one_shot", "two_shot"):
        out.fill_(float("nan"))  # poison: an element the kernel skipped stays NaN
        ctx.ccl.all_reduce(out, inp, op="sum", config=CollectiveConfig(algorithm=algorithm))
        torch.testing.assert_close(out.cpu().double(), ref, rtol=1e-5, atol=1e-5)
    ctx.ccl.all_reduce(inp, inp, op="max")  # in place (two-shot)
    torch.testing.assert_close(inp.cpu().double(), reference.all_reduce(inputs, "max"))
    ctx.barrier()
    if rank == 0:
        ctx.info(f"all_reduce: one-shot, two-shot and in-place max of {n} floats agree on {world_size} ranks")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--n", "--size", dest="n", type=int, default=1000)
    args = parser.parse_args()
    iris.run(main, args.world_size, args.n)
