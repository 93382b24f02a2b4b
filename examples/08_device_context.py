"""The device API as methods: ``iris.DeviceContext`` binds the calling rank and the heap table once.

The ring exchange of ``07_message_passing.py``, rewritten with ``dctx = iris.DeviceContext.initialize(
context, RANK, WORLD_SIZE)``: ``dctx.store(ptr, v, to_rank)`` pushes the block into the right neighbour's
inbox, ``dctx.atomic_add(flag, 1, to_rank, sem="release", scope="sys")`` signals (a counter bumped once
per round holds the epoch, so it is never reset), and ``dctx.load(ptr, from_rank)`` also pulls the same
block straight from the left neighbour's send buffer. Both copies are checked exactly, every round.
``RANK`` and ``WORLD_SIZE`` are constexprs, so neighbour arithmetic happens at compile time.

    python examples/08_device_context.py [--world-size 2] [--n 1000] [--rounds 4]
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
def exchange_kernel(context, send, inbox, out, pulled, ready, free, n, epoch, RANK: tl.constexpr,
                    WORLD_SIZE: tl.constexpr, BLOCK: tl.constexpr):
    dctx = iris.DeviceContext.initialize(context, RANK, WORLD_SIZE)
    left, right = (RANK + WORLD_SIZE - 1) % WORLD_SIZE, (RANK + 1) % WORLD_SIZE
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)  # [BLOCK]
    mask = offs < n
    # ---- produce: wait for the right neighbour to drain the previous round, push, signal
    while tl.atomic_add(free + pid, 0, sem="acquire", scope="sys") < epoch - 1:
        pass
    dctx.store(inbox + offs, tl.load(send + offs, mask=mask), right, mask=mask)
    tl.debug_barrier()  # all threads' stores before the one-thread release (see 07_message_passing.py)
    dctx.atomic_add(ready + pid, 1, right, sem="release", scope="sys")
    # ---- consume: wait for this epoch, read the inbox, pull the same block from the source, hand back
    while tl.atomic_add(ready + pid, 0, sem="acquire", scope="sys") < epoch:
        pass
    tl.store(out + offs, tl.load(inbox + offs, mask=mask), mask=mask)
    tl.store(pulled + offs, dctx.load(send + offs, left, mask=mask), mask=mask)
    tl.debug_barrier()
    dctx.atomic_add(free + pid, 1, left, sem="release", scope="sys")


def rank_data(rank, rounds, n):
    """What ``rank`` sends, one row per round: random int32 from seed SEED + rank."""
    torch.manual_seed(SEED + rank)
    return torch.randint(-2**31, 2**31 - 1, (rounds, n), dtype=torch.int32)


def main(n, rounds):
    ctx = iris.iris(heap_size=(1 << 20) + 8 * (rounds + 1) * n)
    rank, world_size, device = ctx.get_rank(), ctx.get_num_ranks(), ctx.get_device()
    programs = triton.cdiv(n, BLOCK)
    send = ctx.as_symmetric(rank_data(rank, rounds, n).to(device))  # on the heap: the left neighbour pulls it
    inbox = ctx.full((n,), -1, dtype=torch.int32)
    ready, free = ctx.zeros(programs, dtype=torch.int32), ctx.zeros(programs, dtype=torch.int32)
    out = torch.full((rounds, n), -1, dtype=torch.int32, device=device)
    pulled = torch.full((rounds, n), -1, dtype=torch.int32, device=device)
    ctx.barrier()  # data and zeroed flags are in place on every rank before anyone signals

    for rnd in range(rounds):
        exchange_kernel[(programs,)](ctx.get_device_context(), send[rnd], inbox, out[rnd], pulled[rnd], ready, free,
                                     n, rnd + 1, RANK=rank, WORLD_SIZE=world_size, BLOCK=BLOCK)
    ctx.barrier()

    left = (rank - 1) % world_size
    ref = rank_data(left, rounds, n)
    for name, tri in (("pushed", out), ("pulled", pulled)):
        if not torch.equal(tri.cpu(), ref):
            bad = (tri.cpu() != ref).sum(dim=1).tolist()
            raise AssertionError(f"rank {rank}: {name}: mismatches per round {bad} in what rank {left} sent")

    ctx.barrier()
    if rank == 0:
        ctx.info(f"device_context: {rounds} rounds of {n} int32 around {world_size} ranks, pushed with dctx.store "
                 "and pulled with dctx.load, both exact")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=2)
    # Under torchrun pass --size: torchrun's own parser takes --n for one of its options.
    parser.add_argument("--n", "--size", dest="n", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    iris.run(main, args.world_size, args.n, args.rounds)
