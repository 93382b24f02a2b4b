"""``ctx.ccl.reduce_scatter``: rank r ends with slice r (along dim 0) of the sum of every rank's input.

Each rank pulls its slice from every peer's input and reduces it, so ``inp`` must be on the symmetric heap;
``out`` can be any tensor. bf16 inputs are summed in fp32 and rounded once; checked against float64.

    python examples/22_reduce_scatter.py [--world-size 2] [--n 1000]
"""

import argparse

import torch

import iris  # before triton: on the cpu backend this switches Triton to its interpreter
from iris.ccl import reference

iris.set_logger_level(iris.INFO)  # the ranks print ctx.info lines as HH:MM:SS INFO [Iris] [rank/world] ...

SEED = 1234


def main(rows):
    ctx = iris.iris(heap_size=1 << 22)
    rank, world_size = ctx.get_rank(), ctx.get_num_ranks()
    inputs = [torch.randn(world_size * rows, 4, generator=torch.Generator().manual_seed(SEED + r)).bfloat16()
              for r in range(world_size)]
    inp = ctx.empty(world_size * rows, 4, dtype=torch.bfloat16)
    inp.copy_(inputs[rank])
    out = torch.full((rows, 4), float("nan"), dtype=torch.bfloat16, device=ctx.get_device())  # poison
    ctx.ccl.reduce_scatter(out, inp, op="sum")
    ref = reference.reduce_scatter(inputs, rank, "sum")
    torch.testing.assert_close(out.cpu().double(), ref, rtol=8e-3, atol=8e-3)
    ctx.barrier()
    if rank == 0:
        ctx.info(f"reduce_scatter: each of {world_size} ranks holds its [{rows}, 4] slice of the bf16 sum")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--n", "--size", dest="n", type=int, default=1000)
    args = parser.parse_args()
    iris.run(main, args.world_size, args.n)
