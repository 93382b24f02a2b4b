"""Barriers order remote writes: the host barrier ``ctx.barrier()`` and the device barrier ``ctx.device_barrier()``.

Each rank stores a block into its right neighbour's heap with ``iris.store``. Round 1 waits with the host
barrier (it waits for this rank's kernels, then for every rank) and reads on the host. Round 2 uses the
device barrier, a one-program kernel queued on the stream: the read that follows it is queued behind it,
with no host wait in between. Each rank checks that it received its left neighbour's data, exactly.

    python examples/02_barrier.py [--world-size 2] [--n 1000]
"""

import argparse

import torch

import iris  # before triton: on the cpu backend this switches Triton to its interpreter
import triton
import triton.language as tl

iris.set_logger_level(iris.INFO)  # the ranks print ctx.info lines as HH:MM:SS INFO [Iris] [rank/world] ...

SEED = 1234
BLOCK = 256


@triton.jit
def store_to_peer_kernel(src, dst, n, heap_bases, rank, peer, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    iris.store(dst + offs, tl.load(src + offs, mask=mask), rank, peer, heap_bases, mask=mask)


def rank_data(rank, rnd, n):
    """What ``rank`` sends in round ``rnd``: random int32 from a CPU generator, so any rank can rebuild it."""
    torch.manual_seed(SEED + rank + 1000 * rnd)
    return torch.randint(-2**31, 2**31 - 1, (n,), dtype=torch.int32)


def main(n):
    ctx = iris.iris(heap_size=(1 << 20) + 32 * n)
    rank, world_size = ctx.get_rank(), ctx.get_num_ranks()
    left, right = (rank - 1) % world_size, (rank + 1) % world_size
    src = [ctx.as_symmetric(rank_data(rank, rnd, n).to(ctx.get_device())) for rnd in range(2)]
    recv = ctx.full((2, n), -1, dtype=torch.int32)  # poison: what was never written stays -1
    grid = (triton.cdiv(n, BLOCK),)
    ctx.barrier()  # every rank's poison is in place before any neighbour writes into it

    # Round 1: host barrier. It returns once every rank's kernel has finished, so the stores have landed.
    store_to_peer_kernel[grid](src[0], recv[0], n, ctx.get_heap_bases(), rank, right, BLOCK=BLOCK)
    ctx.barrier()
    got_host = recv[0].cpu()

    # Round 2: device barrier. Nothing waits on the host: the clone is queued behind the barrier kernel.
    store_to_peer_kernel[grid](src[1], recv[1], n, ctx.get_heap_bases(), rank, right, BLOCK=BLOCK)
    ctx.device_barrier()
    got_device = recv[1].clone().cpu()

    for rnd, got in enumerate((got_host, got_device)):
        if not torch.equal(got, rank_data(left, rnd, n)):
            bad = (got != rank_data(left, rnd, n)).sum().item()
            raise AssertionError(f"rank {rank}: round {rnd + 1}: {bad} of {n} values differ from rank {left}'s")

    ctx.barrier()
    if rank == 0:
        ctx.info(f"barrier: {world_size} ranks each stored {n} int32 to the right neighbour, received exactly "
                 "after ctx.barrier() and after ctx.device_barrier()")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=2)
    # Under torchrun pass --size: torchrun's own parser takes --n for one of its options.
    parser.add_argument("--n", "--size", dest="n", type=int, default=1000)
    args = parser.parse_args()
    iris.run(main, args.world_size, args.n)
