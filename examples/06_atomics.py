"""Remote atomics: counting, electing, exchanging and reducing across ranks.

- ``atomic_add``: every lane of every program on every rank takes a ticket from one counter on rank 0; the
  count is exact and the tickets (the old values) are exactly 0 .. total-1, each handed out once;
- ``atomic_cas``: the ranks race to write their id into an empty slot on rank 0; exactly one wins;
- ``atomic_xchg``: each rank swaps its value into one slot on rank 0; the old values form a chain;
- ``atomic_max`` / ``atomic_min``: each rank folds its vector into every rank's ``hi`` / ``lo``, which
  ends as the elementwise max / min over ranks.

    python examples/06_atomics.py [--world-size 2] [--n 1000]
"""

import argparse

import numpy as np
import torch

import iris  # before triton: on the cpu backend this switches Triton to its interpreter
import triton
import triton.language as tl

iris.set_logger_level(iris.INFO)  # the ranks print ctx.info lines as HH:MM:SS INFO [Iris] [rank/world] ...

SEED = 1234
BLOCK = 256
TICKET_PROGRAMS = 2


@triton.jit
def scalar_atomics_kernel(counter, slots, tickets, olds, heap_bases, rank, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    lanes = counter + tl.zeros([BLOCK], tl.int32)  # [BLOCK] pointers, all to the one counter
    tl.store(tickets + offs, iris.atomic_add(lanes, 1, rank, 0, heap_bases, sem="relaxed", scope="sys"))
    if tl.program_id(0) == 0:
        tl.store(olds + 0, iris.atomic_cas(slots + 0, -1, rank, rank, 0, heap_bases, sem="acq_rel", scope="sys"))
        tl.store(olds + 1, iris.atomic_xchg(slots + 1, 100 + rank, rank, 0, heap_bases, sem="acq_rel", scope="sys"))


@triton.jit
def max_min_kernel(x, hi, lo, n, heap_bases, rank, WORLD_SIZE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(x + offs, mask=mask)  # [BLOCK] int32
    for peer in range(WORLD_SIZE):
        iris.atomic_max(hi + offs, v, rank, peer, heap_bases, mask=mask, sem="relaxed", scope="sys")
        iris.atomic_min(lo + offs, v, rank, peer, heap_bases, mask=mask, sem="relaxed", scope="sys")


def rank_data(rank, n):
    torch.manual_seed(SEED + rank)
    return torch.randint(-10**6, 10**6, (n,), dtype=torch.int32)


def main(n):
    ctx = iris.iris(heap_size=(1 << 20) + 16 * n)
    rank, world_size, device = ctx.get_rank(), ctx.get_num_ranks(), ctx.get_device()
    counter = ctx.zeros(1, dtype=torch.int32)
    slots = ctx.full((2,), -1, dtype=torch.int32)  # [election: -1 = no winner yet, exchange chain start]
    hi = ctx.full((n,), torch.iinfo(torch.int32).min, dtype=torch.int32)  # identities of max and min
    lo = ctx.full((n,), torch.iinfo(torch.int32).max, dtype=torch.int32)
    x = ctx.as_symmetric(rank_data(rank, n).to(device))
    # Results that stay on this rank need not live on the heap.
    tickets = torch.full((TICKET_PROGRAMS * BLOCK,), -1, dtype=torch.int32, device=device)
    olds = torch.full((2,), -2, dtype=torch.int32, device=device)
    ctx.barrier()  # every rank's initial values are in place before any atomic lands on them

    scalar_atomics_kernel[(TICKET_PROGRAMS,)](counter, slots, tickets, olds, ctx.get_heap_bases(), rank, BLOCK=BLOCK)
    max_min_kernel[(triton.cdiv(n, BLOCK),)](x, hi, lo, n, ctx.get_heap_bases(), rank, world_size, BLOCK=BLOCK)
    ctx.barrier()

    def all_gather(t):  # a host all-gather through ctx.broadcast, for checking
        return [ctx.broadcast(t if rank == src else None, src=src) for src in range(world_size)]

    total = world_size * TICKET_PROGRAMS * BLOCK
    count, winner, last = ctx.broadcast(torch.cat([counter, slots]), src=0).tolist()
    all_tickets = np.sort(np.concatenate(all_gather(tickets)))
    cas_olds, xchg_olds = np.stack(all_gather(olds)).T.tolist()
    data = torch.stack([rank_data(r, n) for r in range(world_size)])
    checks = {
        "atomic_add count": count == total,
        "atomic_add tickets": np.array_equal(all_tickets, np.arange(total)),
        "atomic_cas one winner": sorted(cas_olds) == sorted([-1] + [winner] * (world_size - 1))
                                 and cas_olds[winner] == -1,
        "atomic_xchg chain": sorted(xchg_olds + [last]) == sorted([-1] + [100 + r for r in range(world_size)]),
        "atomic_max": torch.equal(hi.cpu(), data.max(dim=0).values),
        "atomic_min": torch.equal(lo.cpu(), data.min(dim=0).values),
    }
    failed = [name for name, ok in checks.items() if not ok]
    if failed:
        raise AssertionError(f"rank {rank}: {failed} wrong (count={count}, cas olds={cas_olds}, xchg={xchg_olds})")

    ctx.barrier()
    if rank == 0:
        ctx.info(f"atomics: {total} tickets from one counter, rank {winner} won the election, xchg chain and "
                 f"max/min of {n} values over {world_size} ranks all exact")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=2)
    # Under torchrun pass --size: torchrun's own parser takes --n for one of its options.
    parser.add_argument("--n", "--size", dest="n", type=int, default=1000)
    args = parser.parse_args()
    iris.run(main, args.world_size, args.n)
