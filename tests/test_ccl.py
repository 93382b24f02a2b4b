"""Collectives against their torch references: every collective, op, dtype, odd shapes, 2-4 ranks, subgroups,
in-place, CUDA-graph replay, and bad input."""

import pytest
import torch

from iris.ccl import CollectiveConfig
from iris.ccl import reference as ref_ops
from conftest import on_gpu, world_sizes
from rank_utils import GPU_SCALE, SEED, error_message, new_context, warmed_graph

DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int64, torch.int8]
# Relative error against the float64 reference: fp32 sums round in a different order, fp16/bf16 round once.
TOLERANCE = {torch.float32: 1e-6, torch.float16: 1e-3, torch.bfloat16: 8e-3}
ROWS, COLS = (4099, 257) if GPU_SCALE else (37, 7)  # neither a multiple of the block nor of the group


def data(rank, shape, dtype, salt=0):
    gen = torch.Generator().manual_seed(SEED + 101 * salt + rank)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=gen).to(dtype)
    return torch.randint(-100, 100, shape, generator=gen).to(dtype)


def mismatch(name, tri, ref):
    tri = tri.cpu()
    if tri.shape != ref.shape:
        return f"{name}: shape {tuple(tri.shape)} != {tuple(ref.shape)}"
    if not tri.dtype.is_floating_point:
        return None if torch.equal(tri, ref.to(tri.dtype)) else f"{name}: values differ"
    err = ((tri.double() - ref.double()).norm() / ref.double().norm().clamp_min(1e-30)).item()
    return None if err <= TOLERANCE[tri.dtype] else f"{name}: relative error {err:.2e}"


def _collectives_body(dtype):
    ctx = new_context(1 << 28 if GPU_SCALE else 1 << 22)
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    dev = ctx.get_device()
    shape = (world * ROWS, COLS)
    inputs = [data(r, shape, dtype) for r in range(world)]
    inp = ctx.empty(shape, dtype=dtype)
    out = ctx.empty(shape, dtype=dtype)
    fails = []

    def fresh(t, values):
        t.copy_(values.to(dev))
        ctx.barrier()

    def poison(t):
        t.fill_(-99 if dtype.is_signed or dtype.is_floating_point else 99)
        ctx.barrier()

    ops = ["sum", "max", "min"] + (["avg"] if dtype.is_floating_point else [])
    for algorithm in ["one_shot", "two_shot"]:
        for op in ops:
            fresh(inp, inputs[rank])
            poison(out)
            ctx.ccl.all_reduce(out, inp, op=op, config=CollectiveConfig(algorithm=algorithm))
            ctx.barrier()
            fails.append(mismatch(f"all_reduce {algorithm} {op}", out, ref_ops.all_reduce(inputs, op)))
    fresh(out, inputs[rank])  # in place: two-shot
    ctx.ccl.all_reduce(out, out)
    ctx.barrier()
    fails.append(mismatch("all_reduce in place", out, ref_ops.all_reduce(inputs, "sum")))

    chunk = inputs[rank][:ROWS]
    poison(out)
    ctx.ccl.all_gather(out, chunk.to(dev))  # inp need not be on the heap
    ctx.barrier()
    fails.append(mismatch("all_gather", out, ref_ops.all_gather([x[:ROWS] for x in inputs])))

    small = ctx.empty((ROWS, COLS), dtype=dtype)
    for op in ["sum", "max"]:
        fresh(inp, inputs[rank])
        poison(small)
        ctx.ccl.reduce_scatter(small, inp, op=op)  # the slice form, told by its size
        ctx.barrier()
        fails.append(mismatch(f"reduce_scatter {op}", small, ref_ops.reduce_scatter(inputs, rank, op)))
    # push: inp and out anywhere; three calls with fresh data, so flags left by one call cannot release the next
    push = CollectiveConfig(algorithm="push")
    for op, salt in (("sum", 1), ("min", 2), ("sum", 3)):
        values = [data(r, shape, dtype, salt) for r in range(world)]
        poison(small)
        ctx.ccl.reduce_scatter_tensor(small, values[rank].to(dev), op=op, config=push)
        ctx.barrier()
        fails.append(mismatch(f"reduce_scatter push {op} ({salt})", small, ref_ops.reduce_scatter(values, rank, op)))

    fresh(inp, inputs[rank])
    poison(out)
    ctx.ccl.all_to_all_single(out, inp)
    ctx.barrier()
    fails.append(mismatch("all_to_all", out, ref_ops.all_to_all_single(inputs, rank)))

    root = world - 1
    fresh(inp, inputs[rank])
    ctx.ccl.broadcast(inp, src=root)
    ctx.barrier()
    fails.append(mismatch("broadcast", inp, inputs[root]))

    fresh(inp, inputs[rank])
    poison(small)
    ctx.ccl.scatter(small, inp, src=root)
    ctx.barrier()
    fails.append(mismatch("scatter", small, inputs[root].chunk(world)[rank]))

    fresh(small, inputs[rank][:ROWS])
    poison(out)
    ctx.ccl.gather(out, small, dst=root)
    ctx.barrier()
    if rank == root:
        fails.append(mismatch("gather", out, ref_ops.all_gather([x[:ROWS] for x in inputs])))

    fresh(inp, inputs[rank])
    poison(out)
    ctx.ccl.reduce(out, inp, dst=0, op="sum")
    ctx.barrier()
    if rank == 0:
        fails.append(mismatch("reduce", out, ref_ops.all_reduce(inputs, "sum")))

    # send / recv around the ring, one pair at a time: rank 0's data travels to every rank in turn
    fresh(small, inputs[rank][:ROWS])
    for sender in range(world):
        receiver = (sender + 1) % world
        if rank == sender:
            ctx.ccl.send(small, receiver)
        elif rank == receiver:
            ctx.ccl.recv(small, sender)
        ctx.barrier()
    fails.append(mismatch("send/recv", small, inputs[0][:ROWS]))
    ctx.ccl.barrier()
    return [f for f in fails if f]


@pytest.mark.parametrize("world_size", world_sizes() + ([3] if not GPU_SCALE else []))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_collectives(pools, world_size, dtype):
    results = pools(world_size).run(_collectives_body, dtype)
    fails = [f"rank {r}: {f}" for r, fs in enumerate(results) for f in fs]
    assert not fails, "\n".join(fails)


def _reduce_scatter_v_body(dtype):
    """Uneven splits (one rank's empty, one range starting off a 16-byte boundary), every op, out poisoned first; a
    second call hits the remembered launch; splits that differ between ranks are refused on every rank, and out
    is left as it was."""
    from iris.errors import MismatchError

    ctx = new_context(1 << 28 if GPU_SCALE else 1 << 22)
    rank, world, dev = ctx.get_rank(), ctx.get_num_ranks(), ctx.get_device()
    unit = 4099 if GPU_SCALE else 37
    splits = [unit * (r + 1) + 3 for r in range(world)]
    splits[1] = 0
    inputs = [data(r, (sum(splits),), dtype, salt=7) for r in range(world)]
    inp = ctx.empty(sum(splits), dtype=dtype)
    inp.copy_(inputs[rank].to(dev))
    fails = []
    ops = ["sum", "max", "min"] + (["avg"] if dtype.is_floating_point else [])
    for op in ops:
        for attempt in range(2):
            out = torch.full((splits[rank],), -99, dtype=dtype, device=dev)
            ctx.barrier()
            ctx.ccl.reduce_scatter_v(out, inp, splits, op=op)
            ctx.barrier()
            fails.append(mismatch(f"reduce_scatter_v {op} call {attempt}", out,
                                  ref_ops.reduce_scatter_v(inputs, rank, splits, op)))
    if ctx.launches.hits < len(ops):
        fails.append(f"reduce_scatter_v: {ctx.launches.hits} remembered launches taken, expected {len(ops)} or more")
    theirs = list(splits)
    theirs[0] += 1 if rank == 0 else 0  # rank 0 counts one more element for itself
    mine = torch.full((theirs[rank],), -99, dtype=dtype, device=dev)
    wide = ctx.empty(sum(theirs), dtype=dtype)
    wide.copy_(data(rank, (sum(theirs),), dtype).to(dev))
    ctx.barrier()
    try:
        ctx.ccl.reduce_scatter_v(mine, wide, theirs)
        if dev.type == "cuda":  # on GPUs the host learns of the mismatch at its first call after the kernel ran
            torch.cuda.synchronize()
        ctx.barrier()
        fails.append("reduce_scatter_v: splits that differ between ranks were not refused")
    except MismatchError:
        pass
    if not torch.all(mine.cpu() == -99):
        fails.append("reduce_scatter_v: a refused call wrote out")
    return [f for f in fails if f]


@pytest.mark.parametrize("world_size", [2, 3] if not GPU_SCALE else [2])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32], ids=str)
def test_reduce_scatter_v(pools, world_size, dtype):
    results = pools(world_size).run(_reduce_scatter_v_body, dtype)
    fails = [f"rank {r}: {f}" for r, fs in enumerate(results) for f in fs]
    assert not fails, "\n".join(fails)


def _large_body():
    """Messages past ``LARGE_NUMEL``, where ``plan`` switches to about one program per SM, 32 warps and 16384
    elements per step; the length is not a multiple of that block."""
    from iris.ccl import common
    from iris.ccl.reduce_scatter import PUSH_MIN_BYTES

    ctx = new_context(1 << 29)  # inputs and outputs 128 MiB, the push's staging 128 MiB (a power of two)
    rank, world, dev = ctx.get_rank(), ctx.get_num_ranks(), ctx.get_device()
    n = common.LARGE_NUMEL + 4099
    shape = common.plan(ctx, "test", n, None, None)
    fails = [None if (shape.warps, shape.block) == (32, 16384) else f"plan chose {shape} for {n} elements"]
    inputs = [data(r, (world * n,), torch.bfloat16, salt=3) for r in range(world)]
    inp, out = ctx.empty(world * n, dtype=torch.bfloat16), ctx.empty(world * n, dtype=torch.bfloat16)
    inp.copy_(inputs[rank].to(dev))
    calls = {
        "all_reduce one_shot": (lambda: ctx.ccl.all_reduce(out[:n], inp[:n], config=CollectiveConfig(
            algorithm="one_shot")), out[:n], ref_ops.all_reduce([x[:n] for x in inputs], "sum")),
        "all_reduce two_shot": (lambda: ctx.ccl.all_reduce(out[:n], inp[:n]), out[:n],
                                ref_ops.all_reduce([x[:n] for x in inputs], "sum")),
        "all_gather": (lambda: ctx.ccl.all_gather(out, inp[:n]), out, ref_ops.all_gather([x[:n] for x in inputs])),
        "reduce_scatter": (lambda: ctx.ccl.reduce_scatter_tensor(out[:n], inp), out[:n],
                           ref_ops.reduce_scatter(inputs, rank)),
        "reduce_scatter pull": (lambda: ctx.ccl.reduce_scatter_tensor(out[:n], inp, config=CollectiveConfig(
            algorithm="pull")), out[:n], ref_ops.reduce_scatter(inputs, rank)),
        "reduce_scatter push": (lambda: ctx.ccl.reduce_scatter_tensor(out[:n], inp, config=CollectiveConfig(
            algorithm="push")), out[:n], ref_ops.reduce_scatter(inputs, rank)),
        "all_to_all": (lambda: ctx.ccl.all_to_all_single(out, inp), out, ref_ops.all_to_all_single(inputs, rank)),
    }
    for name, (call, result, reference) in calls.items():
        out.fill_(-99)
        ctx.barrier()
        call()
        ctx.barrier()
        fails.append(mismatch(name, result, reference))
        if name == "reduce_scatter":  # "auto" pushes from PUSH_MIN_BYTES slices: then its staging buffer is made
            pushed = any(key[0] == "ccl.reduce_scatter.staging" for key in ctx.ops.workspaces.buffers)
            expected = n * out.element_size() >= PUSH_MIN_BYTES
            fails.append(None if pushed == expected else f"reduce_scatter 'auto' pushed={pushed} for {n} elements")
    return [f for f in fails if f]


@pytest.mark.skipif(not GPU_SCALE, reason="GPU tier: 32 MiB messages (the CPU tier runs the same kernels small)")
def test_large_messages(pools):
    results = pools(2).run(_large_body)
    fails = [f"rank {r}: {f}" for r, fs in enumerate(results) for f in fs]
    assert not fails, "\n".join(fails)


def _subgroup_body():
    import torch.distributed as dist

    ctx = new_context()
    rank = ctx.get_rank()
    evens, odds = dist.new_group([0, 2]), dist.new_group([1, 3])
    group, members = (evens, [0, 2]) if rank % 2 == 0 else (odds, [1, 3])
    inputs = {r: data(r, (10, 3), torch.float32) for r in range(4)}
    inp = ctx.empty((10, 3))
    out = ctx.empty((10, 3))
    inp.copy_(inputs[rank].to(ctx.get_device()))
    ctx.barrier()
    for _ in range(3):  # repeated: the group's counters advance on their own
        ctx.ccl.all_reduce(out, inp, group=group)
    gathered = ctx.empty((20, 3))
    ctx.ccl.all_gather(gathered, inp, group=group)
    ctx.barrier()
    return [mismatch("subgroup all_reduce", out, ref_ops.all_reduce([inputs[m] for m in members], "sum")),
            mismatch("subgroup all_gather", gathered, torch.cat([inputs[m] for m in members]))]


def test_subgroups(pools):
    results = pools(4).run(_subgroup_body)
    fails = [f"rank {r}: {f}" for r, fs in enumerate(results) for f in fs if f]
    assert not fails, "\n".join(fails)


def _graph_body(replays):
    """Each collective captured in its own CUDA graph after one eager call, then replayed with fresh inputs
    copied in before each replay; every replay is checked against the reference."""
    ctx = new_context(1 << 26)
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    n = 1 << 14  # elements per rank slice
    inp = ctx.empty(world * n, dtype=torch.bfloat16)
    out = ctx.empty(world * n, dtype=torch.bfloat16)
    piece = ctx.empty(n, dtype=torch.bfloat16)
    root = world - 1
    cases = {  # name -> (call, what out should hold given every rank's inputs)
        "all_reduce one_shot": (lambda: ctx.ccl.all_reduce(out, inp, config=CollectiveConfig(algorithm="one_shot")),
                                lambda xs: (out, ref_ops.all_reduce(xs, "sum"))),
        "all_reduce two_shot": (lambda: ctx.ccl.all_reduce(out, inp, config=CollectiveConfig(algorithm="two_shot")),
                                lambda xs: (out, ref_ops.all_reduce(xs, "sum"))),
        "all_gather": (lambda: ctx.ccl.all_gather(out, inp[:n]), lambda xs: (out, torch.cat([x[:n] for x in xs]))),
        "reduce_scatter": (lambda: ctx.ccl.reduce_scatter_tensor(piece, inp),
                           lambda xs: (piece, ref_ops.reduce_scatter(xs, rank, "sum"))),
        "reduce_scatter push": (lambda: ctx.ccl.reduce_scatter_tensor(piece, inp, config=CollectiveConfig(algorithm="push")),
                                lambda xs: (piece, ref_ops.reduce_scatter(xs, rank, "sum"))),
        "all_to_all": (lambda: ctx.ccl.all_to_all_single(out, inp), lambda xs: (out, ref_ops.all_to_all_single(xs, rank))),
        "broadcast": (lambda: ctx.ccl.broadcast(inp, src=root), lambda xs: (inp, xs[root])),
        "scatter": (lambda: ctx.ccl.scatter(piece, inp, src=root), lambda xs: (piece, xs[root].chunk(world)[rank])),
        "gather": (lambda: ctx.ccl.gather(out, inp[:n], dst=0),
                   lambda xs: (out, torch.cat([x[:n] for x in xs]) if rank == 0 else None)),
        "reduce": (lambda: ctx.ccl.reduce(out, inp, dst=0),
                   lambda xs: (out, ref_ops.all_reduce(xs, "sum") if rank == 0 else None)),
    }
    stream = torch.cuda.Stream()
    fails = []
    for name, (call, expect) in cases.items():
        replay = warmed_graph(ctx, call, stream)
        ctx.barrier()
        for i in range(replays):
            inputs = [data(r, (world * n,), torch.bfloat16, salt=i + 1) for r in range(world)]
            inp.copy_(inputs[rank].cuda())
            out.fill_(float("nan"))
            piece.fill_(float("nan"))
            ctx.barrier()
            replay()
            torch.cuda.synchronize()
            tri, ref = expect(inputs)
            if ref is not None:
                fails.append(mismatch(f"{name} replay {i}", tri, ref))
            ctx.barrier()  # nobody refills inputs before every rank has checked
    return [f for f in fails if f]


@pytest.mark.skipif(not on_gpu(), reason="CUDA graphs need a GPU (GPU tier)")
def test_collectives_replay_in_cuda_graph(pools):
    results = pools(2).run(_graph_body, 100)
    fails = [f"rank {r}: {f}" for r, fs in enumerate(results) for f in fs]
    assert not fails, "\n".join(fails[:10])


def _empty_body():
    """Zero-element collectives (torch.distributed accepts them): every one returns, on every rank."""
    ctx = new_context()
    inp, out = ctx.zeros(0, 4), ctx.zeros(0, 4)
    calls = {
        "all_reduce one_shot": lambda: ctx.ccl.all_reduce(out, inp, config=CollectiveConfig(algorithm="one_shot")),
        "all_reduce two_shot": lambda: ctx.ccl.all_reduce(out, inp, config=CollectiveConfig(algorithm="two_shot")),
        "all_gather": lambda: ctx.ccl.all_gather(out, inp),
        "reduce_scatter pull": lambda: ctx.ccl.reduce_scatter_tensor(out, inp, config=CollectiveConfig(algorithm="pull")),
        "reduce_scatter push": lambda: ctx.ccl.reduce_scatter_tensor(out, inp, config=CollectiveConfig(algorithm="push")),
        "all_to_all": lambda: ctx.ccl.all_to_all_single(out, inp),
        "broadcast": lambda: ctx.ccl.broadcast(inp, src=0),
    }
    fails = []
    for name, call in calls.items():
        try:
            call()
        except Exception as e:  # noqa: BLE001 - reported by name
            fails.append(f"{name}: {type(e).__name__}: {e}")
    ctx.ccl.barrier()
    return fails


def test_empty_collectives_return(pools):
    results = pools(2).run(_empty_body)
    fails = [f"rank {r}: {f}" for r, fs in enumerate(results) for f in fs]
    assert not fails, "\n".join(fails)


def _bad_input_body():
    ctx = new_context()
    rank = ctx.get_rank()
    inp, out = ctx.zeros(8, 4), ctx.zeros(8, 4)
    r = {
        "shape": error_message(ctx.ccl.all_reduce, ctx.zeros(5, 4), inp),
        "dtype": error_message(ctx.ccl.all_reduce, ctx.zeros(8, 4, dtype=torch.float16), inp),
        "heap": error_message(ctx.ccl.all_reduce, out, torch.zeros(8, 4, device=ctx.get_device())),
        "gather_out": error_message(ctx.ccl.all_gather, ctx.zeros(10, 4), inp),
        "divisible": error_message(ctx.ccl.reduce_scatter, ctx.zeros(1, 4), ctx.zeros(3, 4)),
        "op": error_message(ctx.ccl.all_reduce, out, inp, op="prod"),
        "avg_int": error_message(ctx.ccl.all_reduce, ctx.zeros(4, dtype=torch.int32), ctx.zeros(4, dtype=torch.int32),
                          op="avg"),
        "config": error_message(CollectiveConfig, comm_sms=0),
        "one_shot_in_place": error_message(ctx.ccl.all_reduce, inp, inp, config=CollectiveConfig(algorithm="one_shot")),
        "algorithm": error_message(ctx.ccl.all_reduce, out, inp, config=CollectiveConfig(algorithm="push")),
        "rs_algorithm": error_message(ctx.ccl.reduce_scatter, ctx.zeros(4, 4), inp,
                                      config=CollectiveConfig(algorithm="two_shot")),
        "root": error_message(ctx.ccl.broadcast, inp, src=7),
        "root_tensor": error_message(ctx.ccl.broadcast, out, inp),  # scatter's (out, inp) order on broadcast
        "reduce_list": error_message(ctx.ccl.reduce, out, [inp]),  # torch's list form
    }
    # Check mode: rank 1 passes a different shape. Every rank must refuse, before any kernel touches memory.
    mine = ctx.zeros(8 if rank == 0 else 6, 4)
    theirs = ctx.full((8, 4), 5.0)
    r["mismatch"] = error_message(ctx.ccl.all_reduce, theirs, mine if rank == 0 else ctx.zeros(8, 4)[:6],
                           config=CollectiveConfig(check=True))
    r["untouched"] = bool((theirs == 5.0).all())
    return r


def test_bad_input(pools):
    results = pools(2).run(_bad_input_body)
    r = results[0]
    assert "ccl.all_reduce: out has 20 elements ((5, 4)), expected inp.numel() = 32" in r["shape"]
    assert "ccl.all_reduce: out has dtype torch.float16 but inp has torch.float32" in r["dtype"]
    assert "ccl.all_reduce: inp is not on the symmetric heap" in r["heap"] and "ctx.zeros" in r["heap"]
    assert "ccl.all_gather: out has 40 elements" in r["gather_out"]
    assert "group size 2 * inp.numel() 32" in r["gather_out"]
    assert "ccl.reduce_scatter: inp has 3 rows along dim 0, which the group of 2 ranks does not divide" in \
        r["divisible"]
    assert "ccl.all_reduce: unknown op 'prod'" in r["op"]
    assert "op='avg' needs a floating-point dtype" in r["avg_int"]
    assert "CollectiveConfig: comm_sms=0 is outside [1, 256]" in r["config"]
    assert "one-shot algorithm cannot run in place" in r["one_shot_in_place"]
    assert "ccl.all_reduce: algorithm='push' is not one of ('auto', 'one_shot', 'two_shot')" in r["algorithm"]
    assert "ccl.reduce_scatter: algorithm='two_shot' is not one of ('auto', 'pull', 'push')" in r["rs_algorithm"]
    assert "ccl.broadcast: src=7 is not a rank of the group [0, 1]" in r["root"]
    assert "ccl.broadcast: src must be a rank (an int), got Tensor" in r["root_tensor"]
    assert "TypeError: ccl.reduce: inp must be a torch.Tensor, got list" in r["reduce_list"]
    for rank_result in results:
        assert "ranks disagree on the call" in rank_result["mismatch"], rank_result["mismatch"]
        assert rank_result["untouched"]


def test_reduce_scatter_auto_pushes_large_slices():
    from iris.ccl import common
    from iris.ccl.reduce_scatter import PUSH_MIN_BYTES, pushes

    def plan(algorithm, large):
        return common.Plan(None, CollectiveConfig(algorithm=algorithm), 8192, 16, 256, "test", large)

    assert pushes(plan("auto", True), PUSH_MIN_BYTES, "test")
    assert not pushes(plan("auto", True), PUSH_MIN_BYTES - 2, "test")
    assert not pushes(plan("auto", False), 4 * PUSH_MIN_BYTES, "test")  # the cpu backend never takes the large shape
    assert not pushes(plan("pull", True), 4 * PUSH_MIN_BYTES, "test")
    assert pushes(plan("push", False), 2, "test")
    with pytest.raises(ValueError, match="algorithm='one_shot' is not one of"):
        pushes(plan("one_shot", True), 2, "test")


def test_soak_of_random_collectives():
    """benchmarks/soak.py at CPU size: random kinds, dtypes, sizes and roots, every result checked. The GPU
    tier runs it with --count 10000."""
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    count = 200 if GPU_SCALE else 25
    proc = subprocess.run([sys.executable, "benchmarks/soak.py", "--count", str(count), "--world-size", "2"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=900)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    assert f"soak: {count} collectives checked, none wrong" in output
