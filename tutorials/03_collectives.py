"""
Collectives and their config
============================

``ctx.ccl`` holds the collectives: Triton kernels on the symmetric heap, stream-ordered, graph-capturable after a
first call. Every rank of a group makes the same call; a call that differs is refused on every rank, and nothing is
written. This tutorial runs an all-reduce with each of its algorithms, a reduce-scatter with uneven splits, and a
collective on a subgroup, checking each against torch.
"""

# %%
import torch
import torch.distributed as dist

import iris
from iris.ccl import CollectiveConfig


# %%
# ``inp`` must be on the heap (peers read it); ``out`` may be anywhere for the one-shot algorithm, which reads every
# peer's input and reduces it locally (latency-bound sizes), and must be on the heap for the two-shot one, which
# reduces a shard per rank and stores it into every peer's ``out`` (bandwidth-bound sizes). ``"auto"`` picks by size.
def all_reduce(ctx, n=1000):
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    inp = ctx.full((n,), float(rank + 1))
    expected = torch.full((n,), float(sum(range(1, world + 1))))
    for algorithm in ("one_shot", "two_shot", "auto"):
        out = ctx.full((n,), -1.0)  # poisoned: an element nobody wrote would show
        ctx.barrier()
        ctx.ccl.all_reduce(out, inp, config=CollectiveConfig(algorithm=algorithm))
        ctx.barrier()
        assert torch.equal(out.cpu(), expected), (algorithm, out)


# %%
# ``reduce_scatter_v`` gives rank ``i`` its own count of the reduction: here rank 0 gets 3 elements and rank 1 gets
# 5. ``splits`` must be the same on every rank (it is part of the call that ranks compare).
def uneven(ctx):
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    splits = [3 + 2 * r for r in range(world)]
    inp = ctx.empty(sum(splits))
    inp.copy_(torch.arange(sum(splits), dtype=torch.float32) * (rank + 1))
    out = torch.full((splits[rank],), -1.0, device=ctx.get_device())
    ctx.barrier()
    ctx.ccl.reduce_scatter_v(out, inp, splits)
    ctx.barrier()
    start = sum(splits[:rank])
    total = torch.arange(sum(splits), dtype=torch.float32) * sum(range(1, world + 1))
    assert torch.equal(out.cpu(), total[start:start + splits[rank]]), out


# %%
# A group is a torch.distributed group: ``dist.new_group(ranks)``. Here every rank forms a group with itself alone and
# broadcasts within it, then the whole world all-gathers. A rank that is not in a group does not call its collective.
def groups(ctx):
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    alone = [dist.new_group([r]) for r in range(world)][rank]  # every rank makes every group, in the same order
    mine = ctx.full((4,), float(rank))
    ctx.ccl.broadcast(mine, src=rank, group=alone)
    gathered = ctx.full((4 * world,), -1.0)
    ctx.barrier()
    ctx.ccl.all_gather(gathered, mine)
    ctx.barrier()
    assert torch.equal(gathered.cpu(), torch.arange(world, dtype=torch.float32).repeat_interleave(4)), gathered


def main():
    ctx = iris.iris(heap_size=1 << 20)
    all_reduce(ctx)
    uneven(ctx)
    groups(ctx)
    print(f"rank {ctx.get_rank()}: all_reduce, reduce_scatter_v and the groups match torch")


if __name__ == "__main__":
    iris.run(main, 2)
