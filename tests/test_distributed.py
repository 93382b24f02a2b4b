"""The torch.distributed backend "iris" against torch references: every collective on ordinary tensors,
element by element, with poisoned outputs, through one chunk and through many (a tiny staging buffer);
functional collectives eager and under torch.compile(fullgraph=True); init_process_group("iris"); bad input."""

import pytest
import torch

import iris
from iris.ccl import reference as ref_ops
from conftest import on_gpu
from rank_utils import GPU_SCALE, error_message, new_context, on_stream, poison_value, rank_data, warmed_graph

ROWS, COLS = (4099, 257) if GPU_SCALE else (37, 7)  # odd: no multiple of the block or of the group
REDUCE_TOLERANCE = {torch.float32: 1e-6, torch.bfloat16: 8e-3, torch.float16: 1e-3}


def inputs(world, shape, dtype, device, salt=0):
    n = 1
    for d in shape:
        n *= d
    return [rank_data(r, n, dtype, device, salt).view(shape) for r in range(world)]


def compare(fails, name, tri, ref):
    """Exact for integers and data movement (small integer values are exact in every float type)."""
    tri, ref = tri.cpu(), ref.cpu().to(tri.dtype)
    if tri.shape != ref.shape:
        fails.append(f"{name}: shape {tuple(tri.shape)} != {tuple(ref.shape)}")
    elif not torch.equal(tri, ref):
        bad = (tri != ref).nonzero()
        fails.append(f"{name}: {bad.shape[0]} of {tri.numel()} elements differ, first at {bad[0].tolist()}")


def poisoned(like, shape=None):
    return torch.full(like.shape if shape is None else shape, poison_value(like.dtype), dtype=like.dtype,
                      device=like.device)


class Calls:
    """Counts the ctx.ccl collectives that run, so a test can tell our kernels ran (not a fallback)."""

    def __init__(self, ctx):
        self.counts = {}
        for name in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce", "send",
                     "recv", "all_to_all_single", "reduce_scatter_tensor", "reduce_scatter_v"):
            setattr(ctx.ccl, name, self._wrap(name, getattr(ctx.ccl, name)))
        # a staged all_reduce is ctx.ccl's one-shot kernel with the copy in it, called directly
        from iris.distributed import collectives

        staged = getattr(collectives.all_reduce_staged, "__wrapped__", collectives.all_reduce_staged)
        collectives.all_reduce_staged = self._wrap("all_reduce", staged)
        collectives.all_reduce_staged.__wrapped__ = staged

    def _wrap(self, name, fn):
        def counted(*args, **kwargs):
            self.counts[name] = self.counts.get(name, 0) + 1
            return fn(*args, **kwargs)

        return counted

    def take(self):
        counts, self.counts = self.counts, {}
        return counts


def _collectives_body(dtype, staging_bytes):
    import torch.distributed as dist

    import iris.distributed

    ctx = new_context(1 << 28 if GPU_SCALE else 1 << 22)
    iris.distributed.set_context(ctx, staging_bytes)
    calls = Calls(ctx)
    group = dist.new_group(backend="iris")
    rank, world, dev = ctx.get_rank(), ctx.get_num_ranks(), ctx.get_device()
    fails = []

    def expect(name, ccl_op, tri, ref):
        compare(fails, name, tri, ref)
        ran = calls.take()
        if ccl_op not in ran:
            fails.append(f"{name}: ran {ran}, not ctx.ccl.{ccl_op}")

    # all_reduce: every op, asynchronously, [ROWS * world, COLS] per rank
    full = inputs(world, (world * ROWS, COLS), dtype, dev)
    ops = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}
    if dtype.is_floating_point:
        ops["avg"] = dist.ReduceOp.AVG
    for name, op in ops.items():
        tri = full[rank].clone()
        work = dist.all_reduce(tri, op=op, group=group, async_op=True)
        work.wait()
        ref = ref_ops.all_reduce([x.cpu() for x in full], name)
        if name == "avg":  # rounds once from the exact sum: compare by tolerance
            err = ((tri.cpu().double() - ref).norm() / ref.norm()).item()
            if err > REDUCE_TOLERANCE[dtype]:
                fails.append(f"all_reduce avg: relative error {err:.2e}")
            calls.take()
        else:
            expect(f"all_reduce {name}", "all_reduce", tri, ref)

    # all_gather_into_tensor and all_gather (lists)
    parts = inputs(world, (ROWS, COLS), dtype, dev, salt=1)
    tri = poisoned(parts[rank], (world * ROWS, COLS))
    dist.all_gather_into_tensor(tri, parts[rank], group=group)
    expect("all_gather_into_tensor", "all_gather", tri, torch.cat(parts))
    outs = [poisoned(parts[rank]) for _ in range(world)]
    dist.all_gather(outs, parts[rank], group=group)
    expect("all_gather (lists)", "all_to_all_single", torch.cat(outs), torch.cat(parts))

    # reduce_scatter_tensor and reduce_scatter (lists)
    tri = poisoned(parts[rank])
    dist.reduce_scatter_tensor(tri, full[rank], group=group)
    expect("reduce_scatter_tensor", "reduce_scatter_tensor", tri, ref_ops.reduce_scatter(
        [x.cpu() for x in full], rank))
    tri = poisoned(parts[rank])
    dist.reduce_scatter(tri, list(full[rank].chunk(world)), group=group, op=dist.ReduceOp.MAX)
    expect("reduce_scatter (lists) max", "reduce_scatter_tensor", tri, ref_ops.reduce_scatter(
        [x.cpu() for x in full], rank, "max"))
    # uneven splits, rank j's j + 1 parts (ctx.ccl.reduce_scatter_v; with a small buffer a range spans chunks)
    counts = [(j + 1) * full[0].numel() // (world * (world + 1) // 2 + 1) for j in range(world)]
    flats = [x.reshape(-1)[:sum(counts)] for x in full]
    tri = poisoned(flats[rank][:counts[rank]])
    dist.reduce_scatter(tri, list(flats[rank].split(counts)), group=group)
    expect("reduce_scatter (lists, uneven)", "reduce_scatter_v", tri, ref_ops.reduce_scatter_v(
        [x.cpu() for x in flats], rank, counts))

    # all_to_all_single: equal splits, then uneven ones (rank r sends 1 + (r + 2 j) % 3 rows to rank j)
    tri = poisoned(full[rank])
    dist.all_to_all_single(tri, full[rank], group=group)
    expect("all_to_all_single", "all_to_all_single", tri, ref_ops.all_to_all_single([x.cpu() for x in full], rank))

    def rows_sent(src, dst):
        return (1 + (src + 2 * dst) % 3) * (ROWS // 10 + 1)

    uneven = [inputs(world, (sum(rows_sent(r, j) for j in range(world)), COLS), dtype, dev, salt=2)[r]
              for r in range(world)]
    in_splits = [rows_sent(rank, j) for j in range(world)]
    out_splits = [rows_sent(j, rank) for j in range(world)]
    tri = poisoned(uneven[rank], (sum(out_splits), COLS))
    dist.all_to_all_single(tri, uneven[rank], out_splits, in_splits, group=group)
    ref = torch.cat([uneven[j].split([rows_sent(j, q) for q in range(world)])[rank] for j in range(world)])
    expect("all_to_all_single uneven", "all_to_all_single", tri, ref)

    # all_to_all (lists of different shapes)
    ins = list(uneven[rank].split(in_splits))
    outs = [poisoned(uneven[rank], (n, COLS)) for n in out_splits]
    dist.all_to_all(outs, ins, group=group)
    expect("all_to_all (lists)", "all_to_all_single", torch.cat(outs), ref)

    # broadcast and reduce from / to rank 1; reduce leaves the other ranks' tensors as they were
    root = 1
    tri = parts[rank].clone() if rank == root else poisoned(parts[rank])
    dist.broadcast(tri, src=root, group=group)
    expect("broadcast", "broadcast", tri, parts[root])
    tri = parts[rank].clone()
    dist.reduce(tri, dst=root, group=group)
    expect("reduce", "reduce", tri, ref_ops.all_reduce([x.cpu() for x in parts]) if rank == root
           else parts[rank])

    # send / recv around a ring, with even ranks sending first (a send waits for its recv)
    right, left = (rank + 1) % world, (rank - 1) % world
    tri = poisoned(parts[rank])
    if rank % 2 == 0:
        dist.send(parts[rank], right, group=group)
        dist.recv(tri, left, group=group)
    else:
        dist.recv(tri, left, group=group)
        dist.send(parts[rank], right, group=group)
    expect("send/recv", "recv", tri, parts[left])

    dist.barrier(group=group)
    dist.destroy_process_group(group)
    return fails


@pytest.mark.parametrize("dtype, staging_bytes", [
    (torch.float32, None),                               # one chunk
    (torch.bfloat16, (1 << 20) if GPU_SCALE else 512),   # many chunks
    (torch.int32, (1 << 20) if GPU_SCALE else 1024),
])
def test_collectives(pools, dtype, staging_bytes):
    for rank, fails in enumerate(pools(2).run(_collectives_body, dtype, staging_bytes)):
        assert not fails, f"rank {rank}: " + "; ".join(fails)


def _data_movement_any_dtype_body():
    """float64 and bool are moved as their bytes (the kernels have no such dtype)."""
    import torch.distributed as dist

    import iris.distributed

    ctx = new_context()
    iris.distributed.set_context(ctx, (1 << 20) if GPU_SCALE else 768)  # chunked
    group = dist.new_group(backend="iris")
    rank, world, dev = ctx.get_rank(), ctx.get_num_ranks(), ctx.get_device()
    fails = []
    for dtype in (torch.float64, torch.bool, torch.complex64):
        parts = [(rank_data(r, ROWS * COLS, torch.float32, dev) / 7).to(dtype).view(ROWS, COLS) for r in range(world)]
        tri = torch.zeros((world * ROWS, COLS), dtype=dtype, device=dev)
        dist.all_gather_into_tensor(tri, parts[rank], group=group)
        compare(fails, f"all_gather {dtype}", tri, torch.cat(parts))
        tri = torch.zeros_like(parts[rank])
        dist.broadcast(tri if rank else parts[0].clone(), src=0, group=group)
        if rank:
            compare(fails, f"broadcast {dtype}", tri, parts[0])
    dist.destroy_process_group(group)
    return fails


def test_data_movement_any_dtype(pools):
    for rank, fails in enumerate(pools(2).run(_data_movement_any_dtype_body)):
        assert not fails, f"rank {rank}: " + "; ".join(fails)


def _functional_body(compiled):
    """torch's functional collectives on an iris group, eager and inside torch.compile(fullgraph=True)."""
    import torch.distributed as dist
    import torch.distributed._functional_collectives as fc

    import iris.distributed

    ctx = new_context()
    iris.distributed.set_context(ctx)
    calls = Calls(ctx)
    group = dist.new_group(backend="iris")
    rank, world, dev = ctx.get_rank(), ctx.get_num_ranks(), ctx.get_device()
    full = inputs(world, (world * ROWS, COLS), torch.float32, dev)
    x = full[rank]

    def step(t):
        reduced = fc.all_reduce(t, "sum", group)
        gathered = fc.all_gather_tensor(t, 0, group)
        scattered = fc.reduce_scatter_tensor(t, "sum", 0, group)
        exchanged = fc.all_to_all_single(t, None, None, group)
        return reduced + 1, gathered, scattered, exchanged

    # aot_eager: the graph torch.compile makes, without inductor's C++ compile (minutes on 2 cores)
    fn = torch.compile(step, fullgraph=True, backend="aot_eager") if compiled else step
    tri = [t.wait() if hasattr(t, "wait") else t for t in fn(x)]
    refs = [ref_ops.all_reduce(full) + 1, ref_ops.all_gather(full), ref_ops.reduce_scatter(full, rank),
            ref_ops.all_to_all_single(full, rank)]
    fails = []
    for name, t, r in zip(["all_reduce", "all_gather_tensor", "reduce_scatter_tensor", "all_to_all_single"], tri,
                          refs):
        compare(fails, name, t, r)
    ran = calls.take()
    for op in ("all_reduce", "all_gather", "reduce_scatter_tensor", "all_to_all_single"):
        if op not in ran:
            fails.append(f"ctx.ccl.{op} did not run (ran {ran})")
    return fails


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_functional_collectives(pools, compiled):
    for rank, fails in enumerate(pools(2).run(_functional_body, compiled)):
        assert not fails, f"rank {rank}: " + "; ".join(fails)


def _errors_body():
    import torch.distributed as dist

    import iris.distributed

    ctx = new_context()
    iris.distributed.set_context(ctx)
    group = dist.new_group(backend="iris")
    rank, world, dev = ctx.get_rank(), ctx.get_num_ranks(), ctx.get_device()
    x = rank_data(rank, 8, torch.float32, dev)
    return {
        "product": error_message(dist.all_reduce, x.clone(), op=dist.ReduceOp.PRODUCT, group=group),
        "gather": error_message(dist.gather, x, [x.clone() for _ in range(world)] if rank == 0 else None, dst=0,
                                group=group),
        "tag": error_message(dist.send, x, (rank + 1) % world, group=group, tag=3),
        "strided": error_message(dist.all_reduce, torch.ones(4, 4, device=dev).t(), group=group),
        "float64": error_message(dist.all_reduce, torch.ones(4, dtype=torch.float64, device=dev), group=group),
        "set_context": error_message(iris.distributed.set_context, "ctx"),
    }


def test_errors(pools):
    for found in pools(2).run(_errors_body):
        assert "iris allreduce: reduce op" in found["product"] and "PRODUCT" in found["product"], found["product"]
        assert "NotImplementedError: iris process group: gather is not supported" in found["gather"], found["gather"]
        assert "iris send: tag=3" in found["tag"], found["tag"]
        assert "must be contiguous" in found["strided"], found["strided"]
        assert "iris allreduce: the iris kernels do not reduce torch.float64" in found["float64"], found["float64"]
        assert found["set_context"].startswith("TypeError: iris.distributed.set_context"), found["set_context"]


def _init_process_group_body(spec):
    """The iris group as the default group: the backend makes its own context (its set-up going through gloo),
    and torch's object collectives then run on our kernels. Restores the pool's gloo default group."""
    import torch.distributed as dist

    import iris.distributed
    from iris.distributed import process_group

    store = dist.distributed_c10d._get_default_store()
    rank, world = dist.get_rank(), dist.get_world_size()
    dist.destroy_process_group()
    process_group._bound = None  # no context yet: the backend creates one
    dist.init_process_group(spec, store=dist.PrefixStore(spec, store), rank=rank, world_size=world)
    try:
        full = inputs(world, (world * ROWS, COLS), torch.int64, "cpu")
        tri = full[rank].clone()
        dist.all_reduce(tri)
        fails = []
        compare(fails, "all_reduce", tri, ref_ops.all_reduce(full))
        objects = [None] * world
        dist.all_gather_object(objects, {"rank": rank})
        if objects != [{"rank": r} for r in range(world)]:
            fails.append(f"all_gather_object gave {objects}")
        ctx = iris.distributed.get_context()
        found = (type(dist.group.WORLD).__name__, dist.get_backend(), type(ctx).__name__)
    finally:
        dist.destroy_process_group()
        dist.init_process_group("gloo", store=dist.PrefixStore(spec + "/gloo", store), rank=rank, world_size=world)
    return fails, found


@pytest.mark.skipif(on_gpu(), reason="CPU tensors: on GPUs the default group's tensors would go to gloo")
def test_init_process_group():
    with iris.RankPool(2) as pool:  # its own ranks: the body replaces their default group
        for spec in ["iris", "cpu:gloo,cuda:iris"]:
            for fails, found in pool.run(_init_process_group_body, spec):
                assert not fails, f"{spec}: {fails}"
                assert found == ("IrisProcessGroup", spec, "Iris"), found


def _graph_body(replays):
    """The iris group's collectives (and a functional one) on static ordinary tensors: on GPUs captured once in a
    CUDA graph after a first call and replayed with fresh inputs (a host synchronisation or a heap allocation on
    the path would break the capture or the replays); on the cpu backend called each time."""
    import torch.distributed as dist
    import torch.distributed._functional_collectives as fc

    import iris.distributed

    ctx = new_context(1 << 28 if GPU_SCALE else 1 << 22)
    iris.distributed.set_context(ctx)
    group = dist.new_group(backend="iris")
    rank, world, dev = ctx.get_rank(), ctx.get_num_ranks(), ctx.get_device()
    dtype = torch.bfloat16
    x = torch.empty(world * ROWS, COLS, dtype=dtype, device=dev)
    reduced, gathered = torch.empty_like(x), torch.empty(world * world * ROWS, COLS, dtype=dtype, device=dev)
    scattered, exchanged = torch.empty(ROWS, COLS, dtype=dtype, device=dev), torch.empty_like(x)
    functional = [None]

    def step():
        reduced.copy_(x)
        dist.all_reduce(reduced, group=group)
        dist.all_gather_into_tensor(gathered, x, group=group)
        dist.reduce_scatter_tensor(scattered, x, group=group)
        dist.all_to_all_single(exchanged, x, group=group)
        functional[0] = fc.wait_tensor(fc.all_reduce(x, "max", group))

    stream = torch.cuda.Stream() if dev.type == "cuda" else None
    x.copy_(rank_data(rank, x.numel(), dtype, dev, 50).view(x.shape))
    run = warmed_graph(ctx, step, stream)
    ctx.barrier()
    fails = []
    for i in range(replays):
        full = inputs(world, x.shape, dtype, dev, salt=51 + i)
        x.copy_(full[rank])
        for t in (reduced, gathered, scattered, exchanged):
            t.fill_(-77)
        if stream is not None:
            torch.cuda.synchronize()
        ctx.barrier()
        with on_stream(stream):
            run()
        if stream is not None:
            torch.cuda.synchronize()
        compare(fails, f"all_reduce {i}", reduced, ref_ops.all_reduce(full))
        compare(fails, f"all_gather {i}", gathered, ref_ops.all_gather(full))
        compare(fails, f"reduce_scatter {i}", scattered, ref_ops.reduce_scatter(full, rank))
        compare(fails, f"all_to_all {i}", exchanged, ref_ops.all_to_all_single(full, rank))
        compare(fails, f"functional all_reduce max {i}", functional[0], ref_ops.all_reduce(full, "max"))
        ctx.barrier()  # nobody refills x before every rank has checked
    return fails


def test_replay(pools):
    # CUDA graphs on GPUs; plain repeated calls on the cpu backend
    for rank, fails in enumerate(pools(2).run(_graph_body, 20 if on_gpu() else 2)):
        assert not fails, f"rank {rank}: " + "; ".join(fails)


def _heap_tensors_body():
    """Tensors already on the heap go to the kernels as they are, the staging buffer never written: in place, and
    torch.ops.iris.all_reduce's ordinary result (the one-shot writes it from a heap input, up to 1 MiB)."""
    import torch.distributed as dist

    import iris.compile
    import iris.distributed

    ctx = new_context()
    iris.distributed.set_context(ctx)
    iris.compile.set_context(ctx)
    staging = iris.distributed.staging_for(ctx)
    group = dist.new_group(backend="iris")
    rank, world, dev = ctx.get_rank(), ctx.get_num_ranks(), ctx.get_device()
    full = inputs(world, (world * 37, 7), torch.float32, dev)  # 2 KiB at 2 ranks: the one-shot's size
    x = ctx.empty(full[rank].shape)
    x.copy_(full[rank])
    gathered = ctx.full((world * world * 37, 7), -77.0)
    staging.buffer.fill_(0x7F)
    ctx.barrier()
    fails = []
    compare(fails, "torch.ops.iris.all_reduce", torch.ops.iris.all_reduce(x), ref_ops.all_reduce(full))
    dist.all_gather_into_tensor(gathered, x, group=group)
    dist.all_reduce(x, group=group)
    compare(fails, "all_gather", gathered, ref_ops.all_gather(full))
    compare(fails, "all_reduce", x, ref_ops.all_reduce(full))
    if not bool((staging.buffer == 0x7F).all()):
        fails.append("the staging buffer was written")
    return fails


def test_heap_tensors_skip_staging(pools):
    for rank, fails in enumerate(pools(2).run(_heap_tensors_body)):
        assert not fails, f"rank {rank}: " + "; ".join(fails)


def _subgroup_body():
    """An iris group of ranks 0 and 2 of three (group ranks are not global ranks), then the world group."""
    import torch.distributed as dist

    import iris.distributed

    ctx = new_context()
    iris.distributed.set_context(ctx, (1 << 20) if GPU_SCALE else 512)  # chunked
    rank, world, dev = ctx.get_rank(), ctx.get_num_ranks(), ctx.get_device()
    members = [0, 2]
    pair = dist.new_group(members, backend="iris")
    everyone = dist.new_group(backend="iris")
    full = inputs(world, (2 * ROWS, COLS), torch.int32, dev)
    fails = []
    if rank in members:
        mine = [full[r] for r in members]
        tri = full[rank].clone()
        dist.all_reduce(tri, group=pair)
        compare(fails, "pair all_reduce", tri, ref_ops.all_reduce(mine))
        tri = poisoned(full[rank], (2 * 2 * ROWS, COLS))
        dist.all_gather_into_tensor(tri, full[rank], group=pair)
        compare(fails, "pair all_gather", tri, ref_ops.all_gather(mine))
        tri = full[rank].clone() if rank == 2 else poisoned(full[rank])
        dist.broadcast(tri, src=2, group=pair)  # a global rank, group rank 1
        compare(fails, "pair broadcast", tri, full[2])
    tri = full[rank].clone()
    dist.all_reduce(tri, group=everyone)
    compare(fails, "world all_reduce", tri, ref_ops.all_reduce(full))
    return fails


def test_subgroup(pools):
    for rank, fails in enumerate(pools(3).run(_subgroup_body)):
        assert not fails, f"rank {rank}: " + "; ".join(fails)
