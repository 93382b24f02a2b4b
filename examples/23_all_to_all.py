"""``ctx.ccl.all_to_all``: slice j of rank i's input becomes slice i of rank j's output.

The exchange behind expert parallelism. Each rank pushes slice q of its input into rank q's output, so
``out`` must be on the symmetric heap. Checked exactly.

    python examples/23_all_to_all.py [--world-size 2] [--n 1000]
"""

import argparse

import torch

import iris  # before triton: on the cpu backend this switches Triton to its interpreter
from iris.ccl import reference

iris.set_logger_level(iris.INFO)  # the ranks print ctx.info lines as [Iris] [rank/world] ...


def main(rows):
    ctx = iris.iris(heap_size=1 << 22)
    rank, world_size = ctx.get_rank(), ctx.get_num_ranks()
    # Element value = 1000 * sending rank + position: any misrouted element shows which rank sent it.
    inputs = [1000 * r + torch.arange(world_size * rows, dtype=torch.int64) for r in range(world_size)]
    out = ctx.full((world_size * rows,), -1, dtype=torch.int64)  # poison
    ctx.ccl.all_to_all(out, inputs[rank].to(ctx.get_device()))
    assert torch.equal(out.cpu(), reference.all_to_all(inputs, rank)), f"rank {rank}: all_to_all differs"
    ctx.barrier()
    if rank == 0:
        ctx.info(f"all_to_all: {world_size} x {world_size} slices of {rows} int64 routed exactly")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--n", "--size", dest="n", type=int, default=1000)
    args = parser.parse_args()
    iris.run(main, args.world_size, args.n)
