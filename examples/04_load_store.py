"""Remote load and store inside a Triton kernel: ``iris.load`` from a peer, ``iris.store`` to a peer.

One kernel per rank pulls the right neighbour's ``x`` into a local buffer (``iris.load``) and pushes its
own ``x`` into the right neighbour's ``pushed`` (``iris.store``). The size is not a multiple of the block
(n=1000, BLOCK=256: the last program is partly masked), and the outputs have a poisoned guard tail that
the masked lanes must not touch. Checked exactly against the neighbours' data.

    python examples/04_load_store.py [--world-size 2] [--n 1000]
"""

import argparse

import torch

import iris  # before triton: on the cpu backend this switches Triton to its interpreter
import triton
import triton.language as tl

iris.set_logger_level(iris.INFO)  # the ranks print ctx.info lines as HH:MM:SS INFO [Iris] [rank/world] ...

SEED = 1234
BLOCK = 256
GUARD = 64  # poisoned elements past n that the masks must leave alone


@triton.jit
def load_store_kernel(x, pulled, pushed, n, heap_bases, rank, peer, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)  # [BLOCK]
    mask = offs < n
    # load: data moves from `peer` (from_rank) to us (to_rank); `x + offs` is our own address of x.
    theirs = iris.load(x + offs, rank, peer, heap_bases, mask=mask)
    tl.store(pulled + offs, theirs, mask=mask)
    # store: data moves from us (from_rank) to `peer` (to_rank); `pushed + offs` is our own address.
    mine = tl.load(x + offs, mask=mask)
    iris.store(pushed + offs, mine, rank, peer, heap_bases, mask=mask)


def rank_data(rank, n):
    """Rank ``rank``'s x: random float32 from seed SEED + rank, so any rank can rebuild it."""
    torch.manual_seed(SEED + rank)
    return torch.randn(n)


def main(n):
    ctx = iris.iris(heap_size=(1 << 20) + 16 * n)
    rank, world_size = ctx.get_rank(), ctx.get_num_ranks()
    left, right = (rank - 1) % world_size, (rank + 1) % world_size
    x = ctx.as_symmetric(rank_data(rank, n).to(ctx.get_device()))
    pulled = ctx.full((n + GUARD,), -1.0, dtype=torch.float32)
    pushed = ctx.full((n + GUARD,), -1.0, dtype=torch.float32)
    ctx.barrier()  # every rank's x and poison are in place before anyone reads or writes them

    load_store_kernel[(triton.cdiv(n, BLOCK),)](x, pulled, pushed, n, ctx.get_heap_bases(), rank, right,
                                                 BLOCK=BLOCK)
    ctx.barrier()  # the left neighbour's stores into our `pushed` have landed

    poison = torch.full((GUARD,), -1.0)
    ref_pulled = torch.cat([rank_data(right, n), poison])  # we read the right neighbour's x
    ref_pushed = torch.cat([rank_data(left, n), poison])  # the left neighbour wrote its x into ours
    for name, tri, ref in (("pulled", pulled, ref_pulled), ("pushed", pushed, ref_pushed)):
        if not torch.equal(tri.cpu(), ref):
            bad = (tri.cpu() != ref).nonzero().flatten().tolist()
            raise AssertionError(f"rank {rank}: {name} differs at {len(bad)} indices, first {bad[:5]}")

    ctx.barrier()
    if rank == 0:
        ctx.info(f"load_store: {world_size} ranks loaded {n} floats from and stored {n} floats to a neighbour "
                 f"in blocks of {BLOCK}; exact, guard tail untouched")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=2)
    # Under torchrun pass --size: torchrun's own parser takes --n for one of its options.
    parser.add_argument("--n", "--size", dest="n", type=int, default=1000)
    args = parser.parse_args()
    iris.run(main, args.world_size, args.n)
