"""``ctx.ccl.all_gather``: ``out = cat([inp of every rank], dim=0)`` on every rank.

Each rank pushes its rows straight into its slot of every peer's output, so only ``out`` has to be on the
symmetric heap; ``inp`` can be any tensor on the device. Checked exactly (it only moves data).

    python examples/21_all_gather.py [--world-size 2] [--n 1000]
"""

import argparse

import torch

import iris  # before triton: on the cpu backend this switches Triton to its interpreter
from iris.ccl import reference

iris.set_logger_level(iris.INFO)  # the ranks print ctx.info lines as HH:MM:SS INFO [Iris] [rank/world] ...

SEED = 1234


def main(rows):
    ctx = iris.iris(heap_size=64 * rows * 8 * 4 + (1 << 20))  # room for up to 64 ranks' rows
    rank, world_size = ctx.get_rank(), ctx.get_num_ranks()
    inputs = [torch.randint(-1000, 1000, (rows, 8), generator=torch.Generator().manual_seed(SEED + r),
                            dtype=torch.int32) for r in range(world_size)]
    out = ctx.full((world_size * rows, 8), -1, dtype=torch.int32)  # poison
    ctx.ccl.all_gather(out, inputs[rank].to(ctx.get_device()))
    assert torch.equal(out.cpu(), reference.all_gather(inputs)), f"rank {rank}: all_gather differs"
    ctx.barrier()
    if rank == 0:
        ctx.info(f"all_gather: {world_size} x [{rows}, 8] int32 gathered exactly on every rank")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--n", "--size", dest="n", type=int, default=1000)
    args = parser.parse_args()
    iris.run(main, args.world_size, args.n)
