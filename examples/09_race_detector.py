"""The race detector: a push that forgot its flag, found on a laptop, and the same push with it.

Rank 0 stores a block into rank 1's buffer; rank 1 reads the buffer. Without a flag between them nothing orders
the read after the store: rank 1 may read the old data or the new (on the cpu backend it mostly reads the old).
``sanitize="race"`` (``IRIS_SANITIZE=race``) reports it every run, from happens-before, not from
the values: both accesses with their lines, and what would order them. The fix is the message-passing pair:

    rank 0: iris.store(...) into rank 1          rank 1: .
            atomic_add(flag on rank 1, release,   --->   wait_until(flag, 1) (acquire, sys)
                       sys)                              tl.load(...) sees the block

    python examples/09_race_detector.py [--world-size 2]   # on the cpu backend, GPU or not: the detector needs the interpreter
"""

import argparse
import os

os.environ["IRIS_BACKEND"] = "cpu"  # before iris is imported: it picks the backend at import

import torch  # noqa: E402

import iris  # noqa: E402  (before triton: on the cpu backend this switches Triton to its interpreter)
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

iris.set_logger_level(iris.INFO)  # the ranks print ctx.info lines as HH:MM:SS INFO [Iris] [rank/world] ...

BLOCK = 256


@triton.jit
def push_kernel(data, got, flag, heap_bases, rank, WITH_FLAG: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    if rank == 0:
        iris.store(data + offs, tl.load(data + offs) + 1.0, 0, 1, heap_bases)  # into rank 1's data
        if WITH_FLAG:
            tl.debug_barrier()  # every thread's stores before the one thread's release
            iris.atomic_add(flag, 1, 0, 1, heap_bases, sem="release", scope="sys")
    else:
        if WITH_FLAG:
            iris.wait_until(flag, 1, 1, 0)  # acquire: what rank 0 stored before its release is visible
        tl.store(got + offs, tl.load(data + offs))  # rank 1 reads what rank 0 stored


def push(ctx, with_flag):
    """One push on fresh buffers (ranks 0 and 1; any others watch)."""
    rank = ctx.get_rank()
    data = ctx.full((BLOCK,), 10.0 * (rank + 1), dtype=torch.float32)  # rank 0 pushes 11 over rank 1's 20
    got = ctx.zeros(BLOCK, dtype=torch.float32)
    flag = ctx.zeros(1, dtype=torch.int32)
    ctx.barrier()
    if rank < 2:
        push_kernel[(1,)](data, got, flag, ctx.get_heap_bases(), rank, WITH_FLAG=with_flag, BLOCK=BLOCK)
    ctx.barrier()
    if rank == 1 and with_flag:
        assert torch.equal(got, torch.full((BLOCK,), 11.0)), "rank 1 should read rank 0's block"


def races_at_close(ctx):
    try:
        ctx.close()
    except iris.RaceError as e:
        return len(e.races)
    return 0


def main():
    racy = iris.iris(heap_size=1 << 20, sanitize="race")
    push(racy, with_flag=False)
    found = races_at_close(racy)
    ctx = iris.iris(heap_size=1 << 20, sanitize="race")
    push(ctx, with_flag=True)
    counts = [None] * ctx.get_num_ranks()
    torch.distributed.all_gather_object(counts, (found, len(ctx.sanitizer.races)))
    racy_total, fixed_total = (sum(c[i] for c in counts) for i in range(2))
    # the rank that made the second of the two accesses reports the race without the flag, once
    assert (racy_total, fixed_total) == (1, 0), f"expected one report without the flag and none with it: {counts}"
    if ctx.get_rank() == 0:
        ctx.info(f"race_detector: without the flag {racy_total} race reported (above), with it {fixed_total}")
    ctx.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--world-size", type=int, default=2, help="ranks (at least 2)")
    iris.run(main, parser.parse_args().world_size)
