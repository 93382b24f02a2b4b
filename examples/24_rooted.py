"""The rooted collectives: ``ctx.ccl.broadcast``, ``scatter``, ``gather`` and ``reduce``.

A root sends to or collects from the other ranks: broadcast a tensor from the last rank, scatter its
slices, gather every rank's rows on rank 0, and reduce (sum) onto rank 0. Tensors the peers read or the
root fills in place are heap tensors allocated by every rank, so they sit at the same offset everywhere.

    python examples/24_rooted.py [--world-size 2] [--n 1000]
"""

import argparse

import torch

import iris  # before triton: on the cpu backend this switches Triton to its interpreter
from iris.ccl import reference

iris.set_logger_level(iris.INFO)  # the ranks print ctx.info lines as HH:MM:SS INFO [Iris] [rank/world] ...


def main(n):
    ctx = iris.iris(heap_size=1 << 22)
    rank, world_size = ctx.get_rank(), ctx.get_num_ranks()
    root = world_size - 1
    data = [torch.arange(world_size * n, dtype=torch.int32) * (r + 1) for r in range(world_size)]
    buf = ctx.empty(world_size * n, dtype=torch.int32)
    piece = ctx.full((n,), -1, dtype=torch.int32)

    buf.copy_(data[rank])
    ctx.ccl.broadcast(buf, src=root)
    assert torch.equal(buf.cpu(), data[root]), f"rank {rank}: broadcast differs"

    buf.copy_(data[rank])
    ctx.ccl.scatter(piece, buf, src=root)
    assert torch.equal(piece.cpu(), data[root].chunk(world_size)[rank]), f"rank {rank}: scatter differs"

    piece.copy_(data[rank][:n])
    gathered = ctx.full((world_size * n,), -1, dtype=torch.int32)
    ctx.ccl.gather(gathered, piece, dst=0)
    if rank == 0:
        assert torch.equal(gathered.cpu(), reference.all_gather([d[:n] for d in data])), "gather differs"

    total = ctx.full((n,), -1, dtype=torch.int32)
    ctx.ccl.reduce(total, piece, dst=0, op="sum")
    if rank == 0:
        assert torch.equal(total.cpu(), reference.all_reduce([d[:n] for d in data], "sum")), "reduce differs"
    ctx.barrier()
    if rank == 0:
        ctx.info(f"rooted: broadcast, scatter, gather and reduce of {n}-element slices agree on {world_size} ranks")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--n", "--size", dest="n", type=int, default=1000)
    args = parser.parse_args()
    iris.run(main, args.world_size, args.n)
