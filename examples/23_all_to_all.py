"""``ctx.ccl.all_to_all`` (upstream Iris's layout) and ``ctx.ccl.all_to_all_single`` (torch's).

The exchange behind expert parallelism. ``all_to_all`` takes ``(M, N * W)``: column block j of rank i's input
becomes column block i of rank j's output, as in upstream Iris. ``all_to_all_single`` is torch's
``dist.all_to_all_single``: slice j along dim 0 goes to rank j. Each rank pushes into its peers' outputs, so
``out`` must be on the symmetric heap. Checked exactly.

    python examples/23_all_to_all.py [--world-size 2] [--n 1000]
"""

import argparse

import torch

import iris  # before triton: on the cpu backend this switches Triton to its interpreter
from iris.ccl import reference

iris.set_logger_level(iris.INFO)  # the ranks print ctx.info lines as HH:MM:SS INFO [Iris] [rank/world] ...


def main(rows):
    ctx = iris.iris(heap_size=1 << 22)
    rank, world_size = ctx.get_rank(), ctx.get_num_ranks()
    # Element value = 1000 * sending rank + position: any misrouted element shows which rank sent it.
    wide = [1000 * r + torch.arange(rows * world_size * 4, dtype=torch.int64).view(rows, 4 * world_size)
            for r in range(world_size)]
    out = ctx.full((rows, 4 * world_size), -1, dtype=torch.int64)  # poison
    ctx.ccl.all_to_all(out, wide[rank].to(ctx.get_device()))  # column blocks of 4
    assert torch.equal(out.cpu(), reference.all_to_all(wide, rank)), f"rank {rank}: all_to_all differs"

    tall = [1000 * r + torch.arange(world_size * rows, dtype=torch.int64) for r in range(world_size)]
    out_single = ctx.full((world_size * rows,), -1, dtype=torch.int64)
    ctx.ccl.all_to_all_single(out_single, tall[rank].to(ctx.get_device()))  # slices along dim 0
    assert torch.equal(out_single.cpu(), reference.all_to_all_single(tall, rank)), f"rank {rank}: single differs"
    ctx.barrier()
    if rank == 0:
        ctx.info(f"all_to_all: ({rows}, 4 x {world_size}) column blocks and {world_size} x {rows} rows routed exactly")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--n", "--size", dest="n", type=int, default=1000)
    args = parser.parse_args()
    iris.run(main, args.world_size, args.n)
