"""
Signals and waits: ordering a peer's reads after your writes
============================================================

A store into a peer's heap is not a message: nothing tells the peer when it has landed, and nothing orders the
peer's reads after it. The message-passing pair does: the writer's release atomic on a flag after its data, the
reader's acquire wait on that flag before its reads. This tutorial sends a block that way, then shows what the race
detector says when the flag is left out:

.. code-block:: text

    rank 0: iris.store(block into rank 1)              rank 1:
            iris.atomic_add(flag on rank 1,    ----->         iris.wait_until(flag, 1)   (acquire, sys)
                            release, sys)                     tl.load(block) sees rank 0's data
"""

# %%
# The race detector needs the interpreter, so this tutorial runs on the cpu backend even where there are GPUs.
import os

os.environ["IRIS_BACKEND"] = "cpu"  # before iris is imported: it picks the backend at import

import torch  # noqa: E402

import iris  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

BLOCK = 64


# %%
# Rank 0 pushes ``data + 1`` into rank 1's ``data``; with ``WITH_FLAG`` it then raises rank 1's flag with a release
# atomic at system scope (``tl.debug_barrier()`` first, so that every thread's stores come before the one thread's
# release). Rank 1 waits for the flag with ``iris.wait_until`` (an acquire) and copies what it finds into ``got``.
@triton.jit
def push(data, got, flag, heap_bases, rank, WITH_FLAG: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    if rank == 0:
        iris.store(data + offs, tl.load(data + offs) + 1.0, 0, 1, heap_bases)
        if WITH_FLAG:
            tl.debug_barrier()
            iris.atomic_add(flag, 1, 0, 1, heap_bases, sem="release", scope="sys")
    else:
        if WITH_FLAG:
            iris.wait_until(flag, 1, 1, 0)
        tl.store(got + offs, tl.load(data + offs))


def exchange(with_flag):
    """One push between ranks 0 and 1 on a fresh context watched by the race detector; returns the races found."""
    ctx = iris.iris(heap_size=1 << 20, sanitize="race")
    rank = ctx.get_rank()
    # rank 0 pushes 10 + 1 over rank 1's 20: a stale read shows
    data, got, flag = ctx.full((BLOCK,), 10.0 * (rank + 1)), ctx.zeros(BLOCK), ctx.zeros(1, dtype=torch.int32)
    ctx.barrier()
    push[(1,)](data, got, flag, ctx.get_heap_bases(), rank, WITH_FLAG=with_flag, BLOCK=BLOCK)
    ctx.barrier()
    if rank == 1 and with_flag:
        assert torch.equal(got, torch.full((BLOCK,), 11.0)), got  # rank 0's data + 1, seen after the flag
    try:
        ctx.close()  # raises what the detector found (each race was logged, below, as it was found)
    except iris.RaceError as e:
        return len(e.races)
    return 0


# %%
# With the flag, nothing is reported and rank 1 reads rank 0's block. Without it, the detector reports the race
# every run, from happens-before rather than from the values (a run may read the old block or the new one; on the cpu
# backend rank 1 mostly reads its old 20s): both accesses, each with its line, and what would order them.
def main():
    fixed = exchange(with_flag=True)
    racy = exchange(with_flag=False)
    counts = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(counts, (fixed, racy))
    assert sum(c[0] for c in counts) == 0 and sum(c[1] for c in counts) == 1, counts


if __name__ == "__main__":
    iris.run(main, 2)
