"""
Debugging: mismatched calls, failed peers, bounds
=================================================

Multi-GPU bugs hang or corrupt quietly where they happen. iris turns the common ones into errors that name the
ranks, the calls and the fix, on every rank:

- **calls that differ** between the ranks of a group (another shape, dtype, op, config, or a tensor at another heap
  offset) are found by the kernel's first barrier, before it writes anything; every rank raises ``MismatchError``
  naming both calls, and the context refuses further calls;
- **a peer that raised or died** is seen by the watchdog thread, which releases this rank's waits and raises
  ``PeerError`` naming the peer;
- **addresses outside a heap**: ``IRIS_DEBUG=1`` (or ``iris.iris(debug=True)``) compiles a bounds check into every
  translated address and a bound into every device wait, each failure naming both ranks.
"""

# %%
import torch

import iris


# %%
# Rank 0 reduces 64 elements and rank 1 reduces 32: the kernels' first barrier compares the calls, and both ranks
# raise. The outputs were poisoned first: a refused call writes nothing.
def mismatch(ctx):
    rank = ctx.get_rank()
    n = 64 if rank == 0 else 32
    inp, out = ctx.full((n,), 1.0), ctx.full((n,), -1.0)
    ctx.barrier()
    try:
        ctx.ccl.all_reduce(out, inp)
        ctx.barrier()  # on GPUs the host learns of a mismatch after the kernel: the next call raises it
    except iris.MismatchError as e:
        assert torch.all(out.cpu() == -1.0), "a refused call wrote out"
        print(f"rank {rank}: MismatchError: {str(e).splitlines()[0][:160]}...")
        return True
    return False


# %%
# A rank that raises fails the whole job with its traceback: ``iris.run`` raises ``RankError`` in the launching
# process, naming the rank, and the other ranks' waits for it end in ``PeerError`` instead of hanging.
def fails_on_rank_1():
    ctx = iris.iris(heap_size=1 << 20)
    if ctx.get_rank() == 1:
        raise ValueError("rank 1 gives up")
    ctx.barrier()  # rank 0 waits here for rank 1, which has failed: PeerError names it


def main():
    found = mismatch(iris.iris(heap_size=1 << 20))
    assert found, "the mismatched calls were not refused"


if __name__ == "__main__":
    iris.run(main, 2)
    try:
        iris.run(fails_on_rank_1, 2)
    except iris.RankError as e:
        # a section per failing rank, the one that failed first first; each ends with its exception
        print("iris.run raised RankError; each rank's exception:")
        for section in str(e).split("--- rank ")[1:]:
            print(f"  rank {section.split(' ')[0]}: {section.strip().splitlines()[-1]}")
