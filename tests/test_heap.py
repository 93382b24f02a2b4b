"""The heap a long-running program lives in: freed bytes come back, offsets stay symmetric whatever order ranks
drop tensors in, the heap grows, and workspaces neither leak nor push the heaps out of step."""

import gc
import os
import random

import pytest
import torch

import iris
from conftest import on_gpu
from rank_utils import new_context


def _reuse_body():
    ctx = new_context(heap_size=1 << 20)
    t = ctx.zeros(10)
    view = t[2:]
    del t
    held = ctx.memory_stats()["dropped_awaiting_peers"]  # a view keeps the bytes
    del view
    dropped = ctx.memory_stats()["dropped_awaiting_peers"]
    assert (held, dropped) == (0, 1), (held, dropped)
    for _ in range(12):  # four quarter-heap tensors fill it: without frees the fifth round fails
        t = ctx.zeros(1 << 16, dtype=torch.float32)
        t.fill_(1.0)
        del t
    stats = ctx.memory_stats()
    return stats["num_frees"], stats["allocated_bytes.all.peak"], stats["reserved_bytes.all.current"]


def test_dropped_tensors_return_their_bytes(pools):
    for frees, peak, reserved in pools(2).run(_reuse_body):
        assert frees >= 8
        assert peak <= 1 << 20  # never more than the heap_size of live bytes


def _drop_order_body():
    """Each rank drops the same tensors in its own order, some only later (a reference cycle that waits for the
    collector); every allocation after that must still land at the same offset on every rank."""
    ctx = new_context(heap_size=1 << 22)
    rank = ctx.get_rank()
    offsets = []
    rng = random.Random(rank)  # a different order on every rank
    for step in range(40):
        made = [ctx.empty(n, dtype=torch.float32) for n in (10_000, 30_000, 5_000 + 1_000 * (step % 7), 7)]
        offsets.append([ctx.heap.offset_of(t) for t in made])
        rng.shuffle(made)
        if step % 5 == rank % 5:  # this rank keeps one of them in a cycle for a while
            cycle = [made.pop()]
            cycle.append(cycle)
            del cycle
        while made:
            made.pop()
        if step % 9 == 0:
            gc.collect()
    ctx.empty_cache()
    stats = ctx.memory_stats()
    return offsets, stats["allocation.all.current"], stats["num_agreements"]


def test_offsets_stay_symmetric_when_ranks_drop_in_their_own_order(pools):
    results = pools(4).run(_drop_order_body)
    for rank, (offsets, live, agreements) in enumerate(results):
        assert offsets == results[0][0], f"rank {rank} placed tensors at other offsets than rank 0"
        assert live == 0, f"rank {rank}: {live} allocations still live after every rank dropped them"
        assert agreements > 1
    assert len({o for step in results[0][0] for o in step}) < 40 * 4  # bytes were reused


def _subgroup_workspace_body():
    """A subgroup's workspace must not move the next world-wide allocation on its members only."""
    import torch.distributed as dist

    from iris.ccl import CollectiveConfig

    ctx = new_context()
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    pair = dist.new_group([0, 1])
    if rank < 2:
        inp = torch.arange(64, dtype=torch.float32, device=ctx.get_device()) + rank
        out = torch.full((32,), -7.0, device=ctx.get_device())
        ctx.ccl.reduce_scatter(out, inp, group=pair, config=CollectiveConfig(algorithm="push"))
    x = ctx.full((256,), float(rank + 1))
    out = ctx.zeros(256)
    ctx.ccl.all_reduce(out, x)
    return ctx.heap.offset_of(x), out.cpu().tolist(), world


def test_subgroup_workspace_keeps_heaps_in_step(pools):
    results = pools(4).run(_subgroup_workspace_body)
    offsets = [r[0] for r in results]
    assert len(set(offsets)) == 1, f"offsets by rank {offsets}"
    for offset, values, world in results:
        assert values == [float(sum(range(1, world + 1)))] * 256


def _workspace_bound_body():
    """One buffer per name whatever the sizes; the user's heap does not pay for a subgroup's, and a subgroup's
    workspaces go with its ProcessGroup."""
    import torch.distributed as dist

    from iris.ccl import CollectiveConfig

    ctx = new_context(heap_size=1 << 20)
    rank, world, dev = ctx.get_rank(), ctx.get_num_ranks(), ctx.get_device()
    members = [1, 3]  # ranks no other group of this module has: freed when this group goes
    pair = dist.new_group(members)
    push = CollectiveConfig(algorithm="push")
    before = ctx.memory_stats()["allocated_bytes.all.current"]
    fails = []
    for n in [8, 24, 40, 8, 56, 16, 64, 32] * 3:
        for group, ranks in ((None, list(range(world))), (pair, members)):
            if rank not in ranks:
                continue
            inp = torch.arange(len(ranks) * n, dtype=torch.float32, device=dev) * (rank + 1)
            out = torch.full((n,), -7.0, device=dev)
            ctx.ccl.reduce_scatter(out, inp, group=group, config=push)
            expect = (torch.arange(len(ranks) * n, dtype=torch.float64).view(len(ranks), n)[ranks.index(rank)]
                      * sum(r + 1 for r in ranks))
            if not torch.equal(out.double().cpu(), expect):
                fails.append((n, ranks))
    names = sorted(k[0] for k in ctx.workspaces.buffers)
    grown = ctx.memory_stats()["allocated_bytes.all.current"] - before
    held = ctx.workspaces.bytes()["area"]
    if rank in members:
        dist.destroy_process_group(pair)
    del pair, group
    ctx.empty_cache()  # collects the group here; the members agree that it went everywhere
    return fails, names, grown, held, ctx.workspaces.bytes()["area"], rank in members


def test_workspaces_grow_once_per_name_and_go_with_their_group(pools):
    for rank, (fails, names, grown, held, area_after, member) in enumerate(pools(4).run(_workspace_bound_body)):
        assert not fails, fails
        assert len(names) == len(set(names)) * (2 if member else 1), names  # one per (name, group), not per size
        assert grown <= 4 * 64 * 4 * 2 + 4096, grown  # world staging at most twice the largest, plus flags
        assert (held > 0) == member and area_after == 0, (held, area_after)


def _grow_body():
    ctx = iris.iris(heap_size=1 << 16, allocator_type="vmem")
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    bases = ctx.get_heap_bases().tolist()
    first = ctx.memory_stats()["reserved_bytes.all.current"]
    n = first // 8  # float32: half the starting heap each, so the heap must grow (chunks are 2 MiB on GPUs)
    keep = [ctx.full((n,), float(rank + i)) for i in range(6)]
    out = ctx.zeros(n)
    ctx.ccl.all_reduce(out, keep[-1])  # reads every peer's newest chunk
    stats = ctx.memory_stats()
    expect = float(sum(r + 5 for r in range(world)))
    return (first, stats["reserved_bytes.all.current"], stats["num_grows"], bases == ctx.get_heap_bases().tolist(),
            ctx.get_device_context()[-1].item(), bool((out == expect).all()), ctx.heap.offset_of(keep[-1]))


def test_vmem_heap_grows_symmetrically(pools):
    results = pools(2).run(_grow_body)
    for first, reserved, grows, same_bases, extent, correct, offset in results:
        assert reserved > first and grows >= 1 and same_bases and correct
        assert extent == reserved  # kernels in debug mode see the grown extent
        assert offset == results[0][6]


def _fill(ctx, n):
    """Offsets of ``n``-float tensors allocated until the heap is full (an agreement first: dropped bytes return)."""
    keep = []
    while True:
        try:
            keep.append(ctx.empty(n))
        except MemoryError:
            return [ctx.heap.offset_of(t) for t in keep]


def _capture_body():
    """The heap as a CUDA graph capture sees it, on the cpu backend through the seam that names the capture in
    progress: no agreement and no growth during it, and the bytes of a tensor allocated during it come back only
    once the graph is gone on every rank."""
    from iris.platform import capture

    ctx = new_context(heap_size=1 << 20)
    rank, quarter = ctx.get_rank(), (1 << 20) // 16  # float32 elements in a quarter of the heap
    before = ctx.empty(quarter)
    del before  # dropped before the capture, not yet agreed on
    graph, local, errors = capture.GraphLife(), capture.current, {}
    agreements = ctx.memory_stats()["num_agreements"]
    capture.current = lambda device: graph  # a capture in progress
    try:
        t = ctx.empty(quarter)  # from bytes free now
        t.fill_(1.0)
        captured = ctx.heap.offset_of(t)
        for name, call in (("empty_cache", ctx.empty_cache), ("too_big", lambda: ctx.empty(3 * quarter))):
            try:
                call()
            except (RuntimeError, MemoryError) as e:
                errors[name] = str(e)
        agreed_during = ctx.memory_stats()["num_agreements"] - agreements
    finally:
        capture.current = local
    del t  # the graph replays into its bytes
    while_alive = _fill(ctx, quarter)
    held = ctx.memory_stats()["held_by_graphs"]
    if rank == 0:
        graph.alive = False  # rank 0's graph destroyed; rank 1's not yet
    one_gone = _fill(ctx, quarter)
    graph.alive = False
    all_gone = _fill(ctx, quarter)
    return errors, agreed_during, captured, held, while_alive, one_gone, all_gone


def test_allocation_during_graph_capture_holds_captured_bytes(pools):
    results = pools(2).run(_capture_body)
    for errors, agreed_during, captured, held, while_alive, one_gone, all_gone in results:
        assert agreed_during == 0
        assert "Iris.empty_cache" in errors["empty_cache"] and "capture" in errors["empty_cache"], errors
        assert "CUDA graph capture" in errors["too_big"] and "before capturing" in errors["too_big"], errors
        assert held == 1
        assert captured not in while_alive and captured not in one_gone, (captured, while_alive, one_gone)
        assert len(while_alive) == 3 and captured in all_gone and len(all_gone) == 4, (while_alive, all_gone)
        assert (while_alive, one_gone, all_gone) == results[0][4:], "offsets differ between ranks"


def _capture_workspace_body():
    """A whole-world workspace that grows during a capture keeps its old bytes until the graph is gone (kernels
    captured before the growth use them); a subgroup's cannot be made during one (its members' agreement on an
    offset is not recorded)."""
    from iris.platform import capture

    ctx = new_context(heap_size=1 << 20)
    rank, world = ctx.get_rank(), list(range(ctx.get_num_ranks()))
    old = ctx.heap.offset_of(ctx.workspaces.get("probe", world, (256,), torch.uint8))
    graph, local, error = capture.GraphLife(), capture.current, ""
    capture.current = lambda device: graph
    try:
        ctx.workspaces.get("probe", world, (4096,), torch.uint8)  # grows
        held = ctx.memory_stats()["held_by_graphs"]
        try:
            ctx.workspaces.get("probe", [rank], (64,), torch.uint8)
        except RuntimeError as e:
            error = str(e)
    finally:
        capture.current = local
    ctx.empty_cache()
    while_alive = ctx.heap.offset_of(ctx.empty(256, dtype=torch.uint8))  # best fit: the old buffer's hole, if free
    graph.alive = False
    ctx.empty_cache()
    after = ctx.heap.offset_of(ctx.empty(256, dtype=torch.uint8))
    return old, held, error, while_alive, after


def test_workspace_growth_during_graph_capture(pools):
    for old, held, error, while_alive, after in pools(2).run(_capture_workspace_body):
        assert held == 2, held  # the new buffer and the old one
        assert "CUDA graph capture" in error and "before capturing" in error, error
        assert while_alive != old and after == old, (old, while_alive, after)


def _graph_alloc_body():
    """A heap tensor allocated inside ``torch.cuda.graph`` and used by a captured all_reduce: after the capture it
    is dropped, yet no allocation takes its bytes while the graph lives (replays would overwrite it), and
    replays stay correct; once the graph is reset, its bytes come back."""
    import time

    ctx = new_context(heap_size=1 << 24)
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    n = 1 << 18  # 1 MiB of float32
    out, warm = ctx.zeros(n), ctx.zeros(n)
    ctx.ccl.all_reduce(out, warm)  # compiled, and its workspaces made, before the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        t = ctx.empty(n)
        t.fill_(rank + 1.0)
        ctx.ccl.all_reduce(out, t)
    captured = ctx.heap.offset_of(t)
    del t, warm
    ctx.barrier()
    scratch = []
    while True:  # every byte the heap hands out now
        try:
            scratch.append(ctx.full((n,), -5.0))
        except MemoryError:
            break
    while_alive = [ctx.heap.offset_of(s) for s in scratch]
    held = ctx.memory_stats()["held_by_graphs"]
    correct = []
    for _ in range(3):
        out.fill_(-1.0)
        graph.replay()
        torch.cuda.synchronize()
        correct.append(bool((out == float(sum(range(1, world + 1)))).all()))
    intact = all(bool((s == -5.0).all()) for s in scratch)
    del scratch
    graph.reset()
    torch.cuda.synchronize()
    time.sleep(1.0)  # the driver calls the graph's user-object destructor from a thread of its own
    ctx.barrier()
    after = _fill(ctx, n)
    return captured, held, while_alive, correct, intact, after


@pytest.mark.skipif(not on_gpu(), reason="CUDA graphs need a GPU (GPU tier)")
def test_allocation_inside_cuda_graph_is_held_until_the_graph_is_reset(pools):
    results = pools(2).run(_graph_alloc_body)
    for captured, held, while_alive, correct, intact, after in results:
        assert held == 1 and correct == [True] * 3 and intact, (held, correct, intact)
        assert captured not in while_alive and captured in after, (captured, while_alive, after)


def _raw_allocate_body():
    ctx = new_context()
    t = ctx.heap.allocate(100, torch.float16)
    u = ctx.heap.allocate(3, torch.int64, alignment=4096)
    return tuple(t.shape), t.dtype, ctx.heap.offset_of(t) % 1024, ctx.heap.offset_of(u) % 4096, ctx.is_symmetric(u)


def test_heap_allocate_takes_upstream_arguments(pools):
    for shape, dtype, mod, mod_u, symmetric in pools(2).run(_raw_allocate_body):
        assert shape == (100,) and dtype == torch.float16 and mod == 0 and mod_u == 0 and symmetric


def test_serving_soak_stays_flat():
    import sys

    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "benchmarks"))
    import serve_soak

    summary = iris.launch(serve_soak.main, 3, 12, 32, 7, None)[0]  # ranks 0 and 1 form the subgroup
    assert summary["wrong"] == 0
    assert summary["heap_peak_bytes"] <= max(2 * summary["largest_live_bytes"], summary["start_bytes"]), summary
    assert summary["grew_after_warmup"] is False, summary
