"""Host and device barriers, message passing with release/acquire flags, timeouts, resource release."""

import glob
import re
import time

import pytest
import torch
import triton
import triton.language as tl

import iris
from conftest import on_gpu, world_sizes
from rank_utils import GPU_SCALE, new_context, preset_sync_words, rank_data, warmed_graph


@triton.jit
def _ring_store_kernel(buf, value, n, heap_bases, rank, peer, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    iris.store(buf + offs, tl.zeros((BLOCK,), tl.int32) + value, rank, peer, heap_bases, mask=offs < n)


def _barrier_body(rounds, use_device_barrier):
    """Each round every rank stores the round number into its right neighbour, then barriers, then checks
    it received its left neighbour's round value: a barrier that let a rank through early shows here."""
    ctx = new_context()
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    n = 4096 if GPU_SCALE else 300
    buf = ctx.full((n,), -1, dtype=torch.int32)
    ctx.barrier()
    bad = []
    for r in range(rounds):
        _ring_store_kernel[(triton.cdiv(n, 256),)](buf, r * world + rank, n, ctx.get_heap_bases(), rank,
                                                    (rank + 1) % world, BLOCK=256)
        if use_device_barrier:
            ctx.device_barrier()
        else:
            ctx.barrier()
        expect = r * world + (rank - 1) % world
        if not bool((buf == expect).all()):
            bad.append(r)
        # A second barrier so nobody overwrites buf before its owner has checked it.
        ctx.device_barrier() if use_device_barrier else ctx.barrier()
    return bad


@pytest.mark.parametrize("world_size", world_sizes())
@pytest.mark.parametrize("kind", ["host", "device"])
def test_barriers_order_remote_writes(pools, world_size, kind):
    rounds = 50 if GPU_SCALE else 5
    bad = pools(world_size).run(_barrier_body, rounds, kind == "device")
    assert all(not b for b in bad), bad


def _device_barrier_group_body():
    """Two disjoint groups barrier independently; the counters of one group do not disturb the other."""
    import torch.distributed as dist

    ctx = new_context()
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    evens, odds = dist.new_group([0, 2]), dist.new_group([1, 3])
    group = evens if rank % 2 == 0 else odds
    for _ in range(3):
        ctx.device_barrier(group=group)
    ctx.barrier(group=group)
    ctx.device_barrier()
    if ctx.get_device().type == "cuda":
        torch.cuda.synchronize()
    flags = ctx.group_sync(group, "test").flags[0]  # row 0: device_barrier
    return flags.cpu().tolist(), world


def test_device_barrier_subgroups(pools):
    results = pools(4).run(_device_barrier_group_body)
    for rank, (flags, world) in enumerate(results):
        members = [0, 2] if rank % 2 == 0 else [1, 3]
        # each member signalled three times, as seen here (mark 0: a device_barrier carries no call's fingerprint)
        assert [flags[m] for m in members] == [3 << 32, 3 << 32], flags
        assert all(flags[r] == 0 for r in range(world + 1) if r not in members)  # the mismatch record too


def _skip_barrier_body(timeout_s):
    ctx = iris.iris(1 << 16, timeout_s=timeout_s)
    if ctx.get_rank() == 1:  # absent until the others gave up (one that returns is named at once: test_misuse.py)
        time.sleep(timeout_s + 1.0)
        return "skipped"
    start = time.monotonic()
    try:
        ctx.barrier()
    except iris.RankTimeoutError as e:
        return str(e), e.missing, time.monotonic() - start
    return "no timeout"


def test_barrier_timeout_names_missing_rank(pools):
    results = pools(3).run(_skip_barrier_body, 2.0)
    assert results[1] == "skipped"
    for rank in (0, 2):
        message, missing, waited = results[rank]
        assert missing == [1], message
        assert "Iris.barrier" in message and "rank(s) [1]" in message and "IRIS_TIMEOUT_S" in message
        assert waited < 30


@triton.jit
def _producer_consumer_kernel(data, flag, n, epoch, heap_bases, rank, PRODUCER: tl.constexpr,
                              BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    if PRODUCER:
        # rank 0: write the block into rank 1's heap, then publish it with a sys-scope release
        values = tl.load(data + offs, mask=mask) + epoch
        iris.store(data + offs, values, rank, 1, heap_bases, mask=mask)
        iris.atomic_xchg(flag, epoch, rank, 1, heap_bases, sem="release", scope="sys")
    else:
        # rank 1: acquire the flag on its own heap; after it reads `epoch` the data must be there
        while tl.atomic_add(flag, 0, sem="acquire", scope="sys") < epoch:
            pass


def _message_passing_body(rounds):
    ctx = new_context()
    rank = ctx.get_rank()
    n = 1 << 16 if GPU_SCALE else 500
    block = triton.next_power_of_2(n)
    data = ctx.empty(n, dtype=torch.int64)
    data.copy_(rank_data(0, n, torch.int64, ctx.get_device()))
    flag = ctx.zeros(1, dtype=torch.int64)
    ctx.barrier()
    bad = []
    for epoch in range(1, rounds + 1):  # epoch counters: a later round can never see an earlier round's flag
        if rank <= 1:
            _producer_consumer_kernel[(1,)](data, flag, n, epoch, ctx.get_heap_bases(), rank, PRODUCER=rank == 0,
                                            BLOCK=block)
        if rank == 1:
            expect = rank_data(0, n, torch.int64, ctx.get_device()) + epoch
            if not torch.equal(data, expect):
                bad.append(epoch)
            data.copy_(rank_data(0, n, torch.int64, ctx.get_device()))
        ctx.barrier()
    return bad


@pytest.mark.parametrize("world_size", world_sizes())
def test_message_passing_release_acquire(pools, world_size):
    results = pools(world_size).run(_message_passing_body, 20 if GPU_SCALE else 4)
    assert results[1] == []


def _graph_body(replays):
    """device_barrier captured in a CUDA graph together with a remote store; replayed with fresh values."""
    ctx = new_context()
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    n = 1024
    buf = ctx.full((n,), -1, dtype=torch.int32)
    value = ctx.zeros(1, dtype=torch.int32)
    stream = torch.cuda.Stream()
    ctx.barrier()

    def step():
        _graph_store_kernel[(4,)](buf, value, n, ctx.get_heap_bases(), rank, (rank + 1) % world, BLOCK=256)
        ctx.device_barrier()

    replay = warmed_graph(ctx, step, stream)
    ctx.barrier()
    bad = []
    for i in range(replays):
        value.fill_(1000 * i + rank)
        replay()
        torch.cuda.synchronize()
        if not bool((buf == 1000 * i + (rank - 1) % world).all()):
            bad.append(i)
        ctx.barrier()  # neighbours must not overwrite buf before it is checked
    return bad


@triton.jit
def _graph_store_kernel(buf, value_ptr, n, heap_bases, rank, peer, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    value = tl.load(value_ptr)
    iris.store(buf + offs, tl.zeros((BLOCK,), tl.int32) + value, rank, peer, heap_bases, mask=offs < n)


@pytest.mark.skipif(not on_gpu(), reason="CUDA graphs need a GPU (GPU tier)")
def test_device_barrier_in_cuda_graph(pools):
    results = pools(2).run(_graph_body, 100)
    assert all(not b for b in results), results


# A heap or status segment's mapping (``iris-<token>-r<rank>``, ``iris-<token>-status``) or a growable heap's
# chunk (``memfd:iris-heap``); not any path that merely contains "iris-", such as a virtual environment's.
SEGMENT_MAPPING = re.compile(r"/iris-[0-9a-f]{32}-(r[0-9]+|status)\b|memfd:iris-heap")


def _lifecycle_body(cycles):
    """Create and destroy contexts; the heap memory, every mapping and every watchdog thread must come back
    each time."""
    import gc
    import threading

    used = []
    for _ in range(cycles):
        ctx = new_context(heap_size=1 << 20)
        ctx.zeros(1000)
        ctx.barrier()
        ctx.close()
        del ctx
        gc.collect()
        if torch.cuda.is_available():
            used.append(torch.cuda.memory_allocated())
    with open("/proc/self/maps") as maps:  # heap and status segments still mapped (their files are unlinked)
        mapped = sum(bool(SEGMENT_MAPPING.search(line)) for line in maps)
    watchdogs = [t.name for t in threading.enumerate() if t.name.startswith("iris-watchdog")]
    return used, mapped, watchdogs


def test_create_destroy_leaves_nothing(pools):
    before = set(glob.glob("/dev/shm/iris-*"))
    results = pools(2).run(_lifecycle_body, 100)
    assert set(glob.glob("/dev/shm/iris-*")) == before  # segments are unlinked as soon as all ranks map them
    for used, mapped, watchdogs in results:
        assert len(set(used)) <= 1  # GPU memory does not grow with each cycle
        assert mapped == 0  # every heap and status-page mapping (own and peers') was released
        assert watchdogs == []  # every context's watchdog thread was stopped


# Two signals below the wrap of the words (and of their epochs, the upper halves): the next signals wrap both.
NEAR_WRAP = (1 << 31) - 2


def _preset_sync_counts(ctx, signals):
    """Every word of every group's sync flags on every rank as after ``signals`` signals; the host barrier after it
    (which touches no flag) keeps any rank from signalling before all have preset."""
    preset_sync_words(ctx, signals)
    ctx.barrier()


def _device_barrier_near_wrap_body(preset, rounds):
    """Rank 1 sleeps, then stores a marker into rank 0's heap and enters the barrier; rank 0 enters at once and
    must find the marker once its barrier returns. The counts cross the wrap during the rounds."""
    ctx = new_context()
    rank = ctx.get_rank()
    marker = ctx.full((64,), -1, dtype=torch.int32)
    ctx.device_barrier()  # compiled before the timed rounds
    ctx.barrier()
    _preset_sync_counts(ctx, preset)
    seen = []
    for r in range(rounds):
        if rank == 1:
            time.sleep(0.5)
            _ring_store_kernel[(1,)](marker, r, 64, ctx.get_heap_bases(), rank, 0, BLOCK=64)
        ctx.device_barrier()
        if ctx.get_device().type == "cuda":
            torch.cuda.synchronize()
        if rank == 0:
            seen.append(int(marker[0]))
        ctx.barrier()
    return seen


def test_device_barrier_waits_across_the_wrap(pools):
    results = pools(2).run(_device_barrier_near_wrap_body, NEAR_WRAP, 3)
    assert results[0] == [0, 1, 2], results[0]  # the barrier returned only after rank 1's store, every round


def _all_reduce_near_wrap_body(rounds):
    """all_reduce while the sync counts cross the wrap; rank 1 writes its input late, so a barrier that let
    rank 0 through early reads stale values."""
    ctx = new_context()
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    n = 700
    inp, out = ctx.zeros(n, dtype=torch.int32), ctx.zeros(n, dtype=torch.int32)
    ctx.ccl.all_reduce(out, inp)
    ctx.barrier()
    _preset_sync_counts(ctx, NEAR_WRAP)
    bad = []
    for r in range(rounds):
        if rank == 1:
            time.sleep(0.5)
        inp.copy_(rank_data(rank, n, torch.int32, ctx.get_device(), salt=r))
        out.fill_(-77)
        ctx.ccl.all_reduce(out, inp)
        ref = sum(rank_data(q, n, torch.int32, ctx.get_device(), salt=r) for q in range(world))
        if not torch.equal(out, ref):
            bad.append(r)
        ctx.barrier()
    return bad


def test_all_reduce_across_the_wrap(pools):
    assert pools(2).run(_all_reduce_near_wrap_body, 3) == [[], []]


def _group_tables(world, groups_of_rank):
    """Every rank's GroupTable of a ``world``-rank run, simulated in one process: rank r's table runs in a thread
    of its own, gets the groups ``groups_of_rank(r)`` in order, and exchanges with the others as the store would.
    Returns {rank: {group: (byte offset of its flags in the region, flags)}}."""
    import threading

    from iris.host.groups import GroupTable, region_bytes

    posted, lock, arrived = {}, threading.Lock(), threading.Condition()

    def agree(rank):
        def exchange(ranks, value, check, round=None):
            key = (tuple(ranks), round)
            with arrived:
                posted[key, rank] = value
                arrived.notify_all()
                assert arrived.wait_for(lambda: all((key, r) in posted for r in ranks), timeout=30)
                return [posted[key, r] for r in ranks]
        return exchange

    found, errors = {}, []

    def run(rank):
        try:
            region = torch.zeros(region_bytes(world), dtype=torch.uint8)
            table = GroupTable(region, world, rank, torch.device("cpu"), agree(rank))
            mine = {}
            for ranks in groups_of_rank(rank):
                sync = table.get(list(ranks), "test")
                assert sync.flags.shape == (257, world + 1) and sync.ranks == list(ranks)
                mine[tuple(ranks)] = sync.flags.data_ptr() - region.data_ptr()
            with lock:
                found[rank] = mine
        except Exception as e:  # noqa: BLE001 - reported by the test
            with lock:
                errors.append(f"rank {rank}: {type(e).__name__}: {e}")

    threads = [threading.Thread(target=run, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    return found


def test_groups_of_any_size_agree_on_their_flags():
    """72 ranks (an NVL72 domain): the world, tensor-parallel groups of 8, strided data-parallel groups of 9 and
    every rank's pairs with its ring neighbours (even ranks send right first, odd ranks receive from the left
    first, as a ring exchange must). Every member of a group finds its flags at the same offset; no two groups of
    one rank share them."""
    world, tp = 72, 8

    def groups_of_rank(rank):
        tp_group = tuple(range(rank // tp * tp, rank // tp * tp + tp))
        dp_group = tuple(range(rank % tp, world, tp))
        left, right = tuple(sorted((rank, (rank - 1) % world))), tuple(sorted((rank, (rank + 1) % world)))
        return [tuple(range(world)), tp_group, dp_group] + ([left, right] if rank % 2 else [right, left])

    found = _group_tables(world, groups_of_rank)
    offsets = {}
    for rank, mine in found.items():
        assert len(set(mine.values())) == len(mine), (rank, mine)  # distinct flags for each of its groups
        for ranks, offset in mine.items():
            assert offsets.setdefault(ranks, offset) == offset, (ranks, rank)  # the same on every member
    assert offsets[tuple(range(world))] == 0


@pytest.mark.parametrize("world", [2, 3, 5])
def test_poison_advances_the_peers_column_of_every_slot(world):
    """The watchdog's poison on a region that is not a whole number of slots (3 and 5 ranks): the failed peer's
    column of every slot advances by POISON_STEP, the other columns and the tail past the last slot stay."""
    from iris.host.memory.allocator import align_up
    from iris.host.groups import POISON_STEP, GroupTable, region_bytes, slot_words

    region = torch.zeros(align_up(region_bytes(world)) // 8, dtype=torch.int64)  # as the context reserves it
    table = GroupTable(region, world, 0, torch.device("cpu"))
    peer = world - 1
    table.poison(peer)
    table.poison(peer)  # once per peer: a second step would wrap the words back behind
    whole = table.slots * slot_words(world)
    rows = region[:whole].view(-1, world + 1)
    assert torch.all(rows[:, peer] == POISON_STEP)
    assert not rows[:, :peer].any() and not rows[:, world].any() and not region[whole:].any()


def _group_churn_body(subgroup_slots):
    """Make a group, run collectives on it, drop it: every 2- and 3-rank subset of 4 ranks twice, 20 groups, each
    rank a member of 12 of them, with room for only ``subgroup_slots`` + 3 groups of a rank at once. Later groups
    take slots earlier ones held (their counts left behind), with other members."""
    import itertools

    import torch.distributed as dist

    import iris.host.groups as groups

    local = groups.SUBGROUP_SLOTS
    groups.SUBGROUP_SLOTS = subgroup_slots  # the table sizes its region when made
    try:
        ctx = new_context()
    finally:
        groups.SUBGROUP_SLOTS = local
    rank, world, dev = ctx.get_rank(), ctx.get_num_ranks(), ctx.get_device()
    subsets = [s for k in (2, 3) for s in itertools.combinations(range(world), k)] * 2
    bad, slots_seen = [], set()
    for step, ranks in enumerate(subsets):
        group = dist.new_group(list(ranks))  # collective over the world; non-members get a marker
        inp, out = ctx.zeros(40, dtype=torch.int32), ctx.full((40,), -77, dtype=torch.int32)  # on every rank
        if rank in ranks:
            inp.copy_(rank_data(rank, 40, torch.int32, dev, salt=step))
            ctx.ccl.all_reduce(out, inp, group=group)
            ctx.device_barrier(group=group)
            ref = sum(rank_data(q, 40, torch.int32, dev, salt=step) for q in ranks)
            if not torch.equal(out.cpu(), ref.cpu()):
                bad.append((step, ranks))
            sync = ctx.group_sync(group, "test")
            slots_seen.add((sync.flags.data_ptr() - ctx.groups.region.data_ptr()) // sync.flags.nbytes)
            dist.destroy_process_group(group)
        del group, inp, out
        ctx.empty_cache()  # an agreement: a group every member dropped gives back its slot
    ctx.close()
    return bad, sorted(slots_seen)


def test_dropped_groups_give_back_their_sync_slots(pools):
    """A rank takes part in more groups over the run than its sync region holds at once; collectives on slots
    that earlier groups with other members used stay correct."""
    results = pools(4).run(_group_churn_body, 1)
    for rank, (bad, used) in enumerate(results):
        assert not bad, (rank, bad)
        assert 0 not in used and len(used) <= 4, used  # 12 groups on the 4 slots the region holds beside the world's


def _disagreeing_gpus_body():
    """Each rank's GPU reports a different SM count (100 + 8 * rank, as on GPUs of different kinds); the context
    agrees on the smallest, and the fused ops' "auto" choice and persistent grid follow it on every rank."""
    import os
    import types

    from iris.iris import Iris
    from iris.ops import OpsConfig
    from iris.ops.common import choose_fused
    from iris.ops.gemm import num_programs

    rank = int(os.environ["RANK"])
    local = Iris.get_cu_count
    Iris.get_cu_count = lambda self: 100 + 8 * rank
    try:
        ctx = new_context()
    finally:
        Iris.get_cu_count = local
    gpu = types.SimpleNamespace(get_device=lambda: torch.device("cuda", 0), get_cu_count=lambda: 100 + 8 * rank,
                                get_agreed_cu_count=ctx.get_agreed_cu_count)
    # 104 output tiles: fewer than the SMs of rank 1's GPU, not of rank 0's; traffic enough to be worth fusing
    fused = choose_fused("test", OpsConfig(), gpu, tiles=104, comm_bytes=1 << 30, flops=1 << 30)
    programs = num_programs(torch.device("cuda", 0), 1000, spare=1, sms=ctx.get_agreed_cu_count())
    return ctx.get_agreed_cu_count(), fused, programs


def test_ranks_on_different_gpus_agree_on_grids(pools):
    results = pools(2).run(_disagreeing_gpus_body)
    assert results == [(100, True, 99)] * 2, results


def test_a_group_made_again_agrees_in_a_round_of_its_own():
    """A group dropped (``release``) and made again agrees on a slot again, under store keys of its own: reusing
    the first agreement's keys returned the peers' old lists at once, without waiting for them, so a member could
    signal a slot a peer had yet to zero (the race detector found it)."""
    from iris.host.groups import GroupTable, region_bytes

    rounds = []

    def agree(ranks, used, check, round=None):
        rounds.append((tuple(ranks), round))
        return [used for _ in ranks]

    table = GroupTable(torch.zeros(region_bytes(4), dtype=torch.uint8), 4, 0, torch.device("cpu"), agree)
    for _ in range(3):
        table.get([0, 2], "test")
        table.release([0, 2])
    table.get([0, 1, 3], "test")
    assert rounds == [((0, 2), None), ((0, 2), 2), ((0, 2), 3), ((0, 1, 3), None)]
