"""The copy-engine protocol every fused op shares (``iris/host/copy_engine/schedule.py``), on its own: a band leaves
only once its count is full, lands in every peer's buffer with a flag, ``join`` clears the flags peers raised on our
heap, and a launch that fails releases the side stream instead of leaving it waiting."""

import iris  # noqa: F401  (before triton)
import torch
import triton
import triton.language as tl

from rank_utils import new_context  # noqa: E402


@triton.jit
def _publish_kernel(counts, value):
    # a fused kernel's way to publish a count the side stream waits for: a release, so what came before it on this
    # rank (the row the host wrote, standing in for the kernel's tiles) precedes the copies the count lets go
    tl.atomic_xchg(counts + tl.program_id(0), value, sem="release", scope="sys")


def _exchange_body():
    from iris.host.copy_engine.schedule import CopySchedule

    ctx = new_context()
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    sync = ctx.group_sync(None, "test_copy_schedule")
    out = ctx.full((world, 64), -1.0)
    counts = ctx.zeros(2, dtype=torch.int32)
    arrived = ctx.zeros(world, 1, dtype=torch.int32)
    ctx.barrier()
    schedule = CopySchedule(ctx, sync, "test_copy_schedule")
    # two halves of our row, each after its count reaches 3, then a flag on every peer
    for half in range(2):
        schedule.after(counts[half:half + 1], 3)
        cols = slice(32 * half, 32 * half + 32)
        for peer in schedule.peers:
            schedule.copy(schedule.peer(out, peer)[rank:rank + 1, cols], out[rank:rank + 1, cols])
    for peer in schedule.peers:
        schedule.signal(schedule.peer(arrived, peer)[rank])
    with schedule.launch(counts):  # the "kernel": our row, then the counts it publishes
        out[rank] = torch.arange(64, dtype=torch.float32) + 100 * rank
        _publish_kernel[(2,)](counts, 3)
    schedule.join(arrived=arrived)
    got = out.clone()
    left_counts, left_flags = counts.tolist(), arrived.flatten().tolist()
    ctx.barrier()
    # a launch that raises: the side stream's wait is released (counts poisoned), the error goes on
    schedule = CopySchedule(ctx, sync, "test_copy_schedule")
    schedule.after(counts[0:1], 5)
    try:
        with schedule.launch(counts):
            raise RuntimeError("launch failed")
    except RuntimeError as e:
        failed = str(e)
    ctx.barrier()
    return got, left_counts, left_flags, failed


def test_bands_land_after_their_counts_and_flags_are_cleared(pools):
    world = 3
    results = pools(world).run(_exchange_body, timeout_s=45)  # a hang fails in 45 s, not in a script's timeout
    for rank, (got, left_counts, left_flags, failed) in enumerate(results):
        ref = torch.stack([torch.arange(64, dtype=torch.float32) + 100 * r for r in range(world)])
        assert torch.equal(got.cpu(), ref), f"rank {rank}: {got}"
        assert left_counts == [0, 0], f"rank {rank}: counts left at {left_counts} (the side stream clears them)"
        assert left_flags == [0] * world, f"rank {rank}: arrived flags left at {left_flags} (join clears them)"
        assert failed == "launch failed"
