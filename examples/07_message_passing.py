"""Message passing with a data block and a flag: the pattern under every collective.

Every rank produces for its right neighbour and consumes from its left one, for several rounds that reuse
the same buffers, with no host synchronisation between rounds. One program per block of BLOCK elements:

    producer (rank r, program p)                    consumer (rank r + 1, program p)
    spin until its free[p] >= epoch - 1             .
    put block -> consumer's inbox                   .
    atomic_xchg(consumer's ready[p], epoch,   --->  spin until ready[p] >= epoch    (acquire, sys)
                release, sys)                       copy inbox -> out[round]
    .                                         <---  atomic_xchg(producer's free[p], epoch, release, sys)

The release publishes the block before the flag; the acquire on the other side sees both or neither; sys
scope because the reader is another device. Flags carry the epoch (the round number), never a fixed 1, so
a flag left from the previous round is never mistaken for this one and nothing is ever reset. ``free``
carries the consumer's acknowledgment back, so a producer never overwrites a block still being read.

    python examples/07_message_passing.py [--world-size 2] [--n 1000] [--rounds 4]
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
def exchange_kernel(send, inbox, out, ready, free, n, epoch, heap_bases, rank, left, right, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)  # [BLOCK]
    mask = offs < n
    # ---- produce: wait until the right neighbour has drained the previous round, then send and signal
    while tl.atomic_add(free + pid, 0, sem="acquire", scope="sys") < epoch - 1:
        pass
    iris.put(send + offs, inbox + offs, rank, right, heap_bases, mask=mask)
    # One thread writes the flag, and its release covers only what that thread has seen: the CTA barrier
    # puts every thread's stores before it (Triton 3.6 emits none of its own before a scalar atomic).
    tl.debug_barrier()
    iris.atomic_xchg(ready + pid, epoch, rank, right, heap_bases, sem="release", scope="sys")
    # ---- consume: wait for the left neighbour's flag to reach this epoch, read, then hand the buffer back
    while tl.atomic_add(ready + pid, 0, sem="acquire", scope="sys") < epoch:
        pass
    tl.store(out + offs, tl.load(inbox + offs, mask=mask), mask=mask)
    tl.debug_barrier()  # every thread has read its part of the inbox before the buffer is handed back
    iris.atomic_xchg(free + pid, epoch, rank, left, heap_bases, sem="release", scope="sys")


def rank_data(rank, rounds, n):
    """What ``rank`` sends, one row per round: random float32 from seed SEED + rank."""
    torch.manual_seed(SEED + rank)
    return torch.randn(rounds, n)


def main(n, rounds):
    ctx = iris.iris(heap_size=(1 << 20) + 8 * n)
    rank, world_size, device = ctx.get_rank(), ctx.get_num_ranks(), ctx.get_device()
    left, right = (rank - 1) % world_size, (rank + 1) % world_size
    programs = triton.cdiv(n, BLOCK)
    inbox = ctx.full((n,), -1.0, dtype=torch.float32)  # written by the left neighbour
    ready = ctx.zeros(programs, dtype=torch.int32)  # ready[p]: last epoch whose block p is in our inbox
    free = ctx.zeros(programs, dtype=torch.int32)  # free[p]: last epoch the right neighbour has read
    send = rank_data(rank, rounds, n).to(device)  # only read locally: need not be on the heap
    out = torch.full((rounds, n), -1.0, device=device)
    ctx.barrier()  # flags are zero on every rank before anyone signals

    for rnd in range(rounds):
        exchange_kernel[(programs,)](send[rnd], inbox, out[rnd], ready, free, n, rnd + 1, ctx.get_heap_bases(),
                                     rank, left, right, BLOCK=BLOCK)
    ctx.barrier()

    ref = rank_data(left, rounds, n)
    if not torch.equal(out.cpu(), ref):
        bad = (out.cpu() != ref).sum(dim=1).tolist()
        raise AssertionError(f"rank {rank}: mismatches per round {bad} in what rank {left} sent")
    if ready.cpu().tolist() != [rounds] * programs:
        raise AssertionError(f"rank {rank}: flags {ready.cpu().tolist()} should all hold the last epoch {rounds}")

    ctx.barrier()
    if rank == 0:
        ctx.info(f"message_passing: {rounds} rounds of {n} floats around {world_size} ranks in {programs} blocks, "
                 "flag = epoch, every block exact")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=2)
    # Under torchrun pass --size: torchrun's own parser takes --n for one of its options.
    parser.add_argument("--n", "--size", dest="n", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    iris.run(main, args.world_size, args.n, args.rounds)
