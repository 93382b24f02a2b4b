"""Memory-to-memory transfers inside a Triton kernel: ``iris.put``, ``iris.get`` and ``iris.copy``.

- ``put``: our ``src`` -> the right neighbour's ``put_dst`` (we are ``from_rank``);
- ``get``: the left neighbour's ``src`` -> our ``get_dst`` (we are ``to_rank``);
- ``copy``: the right neighbour's ``src`` -> our ``copy_dst``, with us as ``cur_rank`` and one end.
All pointers are our own addresses of the buffers; iris translates them to the peer's heap. Checked
exactly; n is not a multiple of the block, and each output has a poisoned guard tail.

    python examples/05_put_get.py [--world-size 2] [--n 1000]
"""

import argparse

import torch

import iris  # before triton: on the cpu backend this switches Triton to its interpreter
import triton
import triton.language as tl

iris.set_logger_level(iris.INFO)  # the ranks print ctx.info lines as HH:MM:SS INFO [Iris] [rank/world] ...

SEED = 1234
BLOCK = 256
GUARD = 64


@triton.jit
def put_get_copy_kernel(src, put_dst, get_dst, copy_dst, n, heap_bases, rank, left, right, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)  # [BLOCK]
    mask = offs < n
    # The first rank argument is the calling rank, the second the peer (copy names both ends and the caller).
    iris.put(src + offs, put_dst + offs, rank, right, heap_bases, mask=mask)  # us -> right
    iris.get(src + offs, get_dst + offs, rank, left, heap_bases, mask=mask)  # left -> us
    iris.copy(src + offs, copy_dst + offs, right, rank, rank, heap_bases, mask=mask)  # right -> us; cur_rank=us


def rank_data(rank, n):
    """Rank ``rank``'s src: random int64 from seed SEED + rank, so any rank can rebuild it."""
    torch.manual_seed(SEED + rank)
    return torch.randint(-2**62, 2**62, (n,), dtype=torch.int64)


def main(n):
    ctx = iris.iris(heap_size=(1 << 20) + 32 * n)
    rank, world_size = ctx.get_rank(), ctx.get_num_ranks()
    left, right = (rank - 1) % world_size, (rank + 1) % world_size
    src = ctx.as_symmetric(rank_data(rank, n).to(ctx.get_device()))
    put_dst, get_dst, copy_dst = (ctx.full((n + GUARD,), -1, dtype=torch.int64) for _ in range(3))
    ctx.barrier()  # every rank's src and poison are in place before anyone reads or writes them

    put_get_copy_kernel[(triton.cdiv(n, BLOCK),)](src, put_dst, get_dst, copy_dst, n, ctx.get_heap_bases(), rank,
                                                   left, right, BLOCK=BLOCK)
    ctx.barrier()  # the left neighbour's puts into our put_dst have landed

    poison = torch.full((GUARD,), -1, dtype=torch.int64)
    expected = {
        "put_dst": torch.cat([rank_data(left, n), poison]),  # the left neighbour put its src here
        "get_dst": torch.cat([rank_data(left, n), poison]),
        "copy_dst": torch.cat([rank_data(right, n), poison]),
    }
    for name, tri in (("put_dst", put_dst), ("get_dst", get_dst), ("copy_dst", copy_dst)):
        ref = expected[name]
        if not torch.equal(tri.cpu(), ref):
            bad = (tri.cpu() != ref).nonzero().flatten().tolist()
            raise AssertionError(f"rank {rank}: {name} differs at {len(bad)} indices, first {bad[:5]}")

    ctx.barrier()
    if rank == 0:
        ctx.info(f"put_get: {world_size} ranks moved {n} int64 with put, get and copy; exact, guard tails untouched")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=2)
    # Under torchrun pass --size: torchrun's own parser takes --n for one of its options.
    parser.add_argument("--n", "--size", dest="n", type=int, default=1000)
    args = parser.parse_args()
    iris.run(main, args.world_size, args.n)
