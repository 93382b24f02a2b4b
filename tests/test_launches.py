"""Remembered launches (iris/host/launches.py) and the heap's allocation path: a cache hit gives the same result
as the general path, and a change of shape, dtype, aliasing, alignment, group or config is a miss, never a stale
launch. The direct launch of a compiled kernel is checked against a recorded fake (no GPU here)."""

import gc

import torch
import torch.distributed as dist

from iris.ccl import CollectiveConfig
from iris.ccl import reference as ref_ops
from iris.host import launches
from rank_utils import SEED, error_message, new_context


def _data(rank, shape, dtype, salt=0):
    gen = torch.Generator().manual_seed(SEED + 31 * salt + rank)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=gen).to(dtype)
    return torch.randint(-50, 50, shape, generator=gen).to(dtype)


def _close(tri, ref):
    tri, ref = tri.cpu().double(), ref.double()
    return tri.shape == ref.shape and torch.allclose(tri, ref, rtol=1e-2, atol=1e-2)


def _twice(cache, fails, label, check, expect_hit=False):
    """Run ``check(round)`` (True when right; fresh inputs and poisoned outputs each round) twice: the first time
    a hit of ``cache`` as ``expect_hit`` says, the second a hit; both must match the reference."""
    for round_ in range(2):
        hits, misses = cache.hits, cache.misses
        ok = check(round_)
        hit = cache.hits > hits
        if not ok:
            fails.append(f"{label} round {round_}: wrong result")
        if hit != (expect_hit or round_ == 1):
            fails.append(f"{label} round {round_}: hit={hit} (misses {misses}->{cache.misses})")


def _cached_calls_body():
    ctx = new_context(1 << 22)
    rank, world, dev = ctx.get_rank(), ctx.get_num_ranks(), ctx.get_device()
    cache, fails = ctx.launches, []
    one_shot, two_shot = CollectiveConfig(algorithm="one_shot"), CollectiveConfig(algorithm="two_shot")
    pair = dist.new_group(list(range(world)))  # the same ranks, another group: another slot and key

    def all_reduce_case(shape, dtype, config=None, group=None, in_place=False, offset=0):
        def check(round_):
            xs = [_data(r, shape, dtype, salt=round_ + 7 * len(fails)) for r in range(world)]
            store = ctx.empty(offset + xs[rank].numel(), dtype=dtype)
            inp = store[offset:].view(shape)
            inp.copy_(xs[rank])
            out = inp if in_place else ctx.empty(shape, dtype=dtype).fill_(-7)
            ctx.barrier()
            ctx.ccl.all_reduce(out, inp, group=group, config=config)
            ctx.barrier()
            return _close(out, ref_ops.all_reduce(xs, "sum"))
        return check

    def all_gather_case(n, dtype):
        def check(round_):
            xs = [_data(r, (n,), dtype, salt=round_) for r in range(world)]
            out = ctx.empty(world * n, dtype=dtype).fill_(-7)
            ctx.barrier()
            ctx.ccl.all_gather(out, xs[rank].to(dev))
            ctx.barrier()
            return _close(out, torch.cat(xs))
        return check

    def reduce_scatter_case(n, dtype):
        def check(round_):
            xs = [_data(r, (world * n,), dtype, salt=round_) for r in range(world)]
            inp = ctx.empty(world * n, dtype=dtype).copy_(xs[rank])
            out = torch.full((n,), -7, dtype=dtype, device=dev)
            ctx.barrier()
            ctx.ccl.reduce_scatter(out, inp)
            ctx.barrier()
            return _close(out, ref_ops.reduce_scatter(xs, rank, "sum"))
        return check

    def rmsnorm_case(tokens, hidden, eps):
        def check(round_):
            xs = [_data(r, (tokens, hidden), torch.float32, salt=round_) for r in range(world)]
            residual = _data(99, (tokens, hidden), torch.float32).to(dev)
            weight = _data(98, (hidden,), torch.float32).to(dev)
            inp = ctx.empty(tokens, hidden).copy_(xs[rank])
            out, residual_out = torch.full_like(residual, -7), torch.full_like(residual, -7)
            ctx.barrier()
            ctx.ccl.all_reduce_rmsnorm(out, residual_out, inp, residual, weight, eps=eps)
            ctx.barrier()
            ref_out, ref_residual = ref_ops.all_reduce_rmsnorm(xs, residual.cpu(), weight.cpu(), eps)
            return _close(residual_out, ref_residual) and _close(out, ref_out)
        return check

    cases = [  # (name, check, expect a hit the first time: the key was seen before)
        ("all_reduce fp32 (37, 7)", all_reduce_case((37, 7), torch.float32), False),
        ("all_reduce fp32 (37, 7) again", all_reduce_case((37, 7), torch.float32), True),
        ("all_reduce shape (7, 37)", all_reduce_case((7, 37), torch.float32), False),
        ("all_reduce dtype bf16", all_reduce_case((37, 7), torch.bfloat16), False),
        ("all_reduce misaligned by 4 bytes", all_reduce_case((37, 7), torch.float32, offset=1), False),
        ("all_reduce in place", all_reduce_case((37, 7), torch.float32, in_place=True), False),
        ("all_reduce config one_shot", all_reduce_case((37, 7), torch.float32, config=one_shot), False),
        ("all_reduce config two_shot", all_reduce_case((37, 7), torch.float32, config=two_shot), False),
        ("all_reduce another group", all_reduce_case((37, 7), torch.float32, group=pair), False),
        ("all_gather 33", all_gather_case(33, torch.float16), False),
        ("all_gather 34", all_gather_case(34, torch.float16), False),
        ("reduce_scatter 19", reduce_scatter_case(19, torch.float32), False),
        ("all_reduce_rmsnorm 3x40", rmsnorm_case(3, 40, 1e-6), False),
        ("all_reduce_rmsnorm eps", rmsnorm_case(3, 40, 1e-2), False),
    ]
    for name, check, expect_hit in cases:
        _twice(cache, fails, f"rank {rank}: {name}", check, expect_hit)

    # A hit still checks what the key cannot know: an input off the heap raises the general path's error.
    inp, out = ctx.ones(37, 7), ctx.empty(37, 7)
    ctx.ccl.all_reduce(out, inp)
    ctx.barrier()
    message = error_message(ctx.ccl.all_reduce, out, torch.ones(37, 7, device=dev))
    if "not on the symmetric heap" not in message:
        fails.append(f"rank {rank}: an off-heap input on a cached key: {message}")
    # Check mode is never cached: every call compares across ranks.
    hits = cache.hits
    ctx.ccl.all_reduce(out, inp, config=CollectiveConfig(check=True))
    ctx.ccl.all_reduce(out, inp, config=CollectiveConfig(check=True))
    if cache.hits != hits:
        fails.append(f"rank {rank}: check mode took a cached launch")
    # The cache holds a group weakly (its sync slot comes back when it goes), and another object under the same
    # key (an id the collector reused) is a miss.
    group = dist.new_group(list(range(world)))
    key = launches.key_of("ccl.all_reduce", group, None, (out, inp), "sum")
    ctx.ccl.all_reduce(out, inp, group=group)
    if cache.stored(key, dist.new_group(list(range(world))), None) is not None:
        fails.append(f"rank {rank}: a cached launch was taken for another group under the same key")
    dist.destroy_process_group(group)  # torch.distributed holds a group until then
    del group
    gc.collect()
    if cache._entries[key][1]() is not None:
        fails.append(f"rank {rank}: the launch cache kept a dropped group alive")
    ctx.barrier()
    return fails


def test_cached_launches_match_the_general_path(pools):
    fails = [f for fs in pools(2).run(_cached_calls_body) for f in fs]
    assert not fails, "\n".join(fails)


def _fused_calls_body():
    """Each fused op twice on fresh operands and poisoned outputs: the second call a remembered launch, both
    right; then a change of what the launch was built for (a strided A, a B at another dtype, out at another
    offset, another shape of the op's workspaces in between) misses and is right again."""
    from iris.ops import OpsConfig
    from iris.ops import reference as ref_fused

    ctx = new_context(1 << 24)
    rank, world, dev = ctx.get_rank(), ctx.get_num_ranks(), ctx.get_device()
    cache, fails = ctx.launches, []
    config = OpsConfig(variant="fused", copy_engine=False, block_m=32, block_n=32, block_k=32)
    m_local, n_local, k = 32, 32, 40
    m, n = world * m_local, world * n_local

    def ranks_data(shape, salt, dtype=torch.float32):
        return [_data(r, shape, dtype, salt) for r in range(world)]

    def strided(x):  # the same values as a view with another row stride
        wide = torch.full((x.shape[0], x.shape[1] + 8), float("nan"), dtype=x.dtype, device=dev)
        wide[:, :x.shape[1]] = x
        return wide[:, :x.shape[1]]

    def matmul_all_gather(salt, a_view=lambda x: x, offset=0):
        a, bs = _data(0, (m, k), torch.float32, salt), ranks_data((k, n_local), salt + 1)
        out = ctx.empty(offset + m * n)[offset:].view(m, n).fill_(float("nan"))
        ctx.barrier()
        ctx.ops.matmul_all_gather(out, a_view(a.to(dev)), bs[rank].to(dev), config=config)
        ctx.barrier()
        return _close(out, ref_fused.matmul_all_gather(a, bs))

    def all_gather_matmul(salt, a_view=lambda x: x, dtype=torch.float32):
        a_rows, b = ranks_data((m_local, k), salt, dtype), _data(0, (k, n), dtype, salt + 1)
        out = torch.full((m, n), float("nan"), dtype=dtype, device=dev)
        ctx.barrier()
        ctx.ops.all_gather_matmul(out, a_view(a_rows[rank].to(dev)), b.to(dev), config=config)
        ctx.barrier()
        return _close(out, ref_fused.all_gather_matmul(a_rows, b))

    def reduce_op(name):
        def check(salt, a_view=lambda x: x, offset=0):
            a_k, b_k = ranks_data((m, k), salt), ranks_data((k, n), salt + 1)
            if name == "matmul_all_reduce":
                out = ctx.empty(offset + m * n)[offset:].view(m, n).fill_(float("nan"))
                ref = ref_fused.matmul_all_reduce(a_k, b_k)
            else:
                out = torch.full((m_local, n), float("nan"), device=dev)
                ref = ref_fused.matmul_reduce_scatter(a_k, b_k, rank)
            ctx.barrier()
            getattr(ctx.ops, name)(out, a_view(a_k[rank].to(dev)), b_k[rank].to(dev), config=config)
            ctx.barrier()
            return _close(out, ref)
        return check

    cases = {"matmul_all_gather": matmul_all_gather, "all_gather_matmul": all_gather_matmul,
             "matmul_all_reduce": reduce_op("matmul_all_reduce"),
             "matmul_reduce_scatter": reduce_op("matmul_reduce_scatter")}
    changes = {  # (what changes, the op, its keyword arguments, a hit expected)
        "a strided A": ("matmul_all_gather", dict(a_view=strided), False),
        # the kernel finds out's heap offset at run time: 16 bytes further is the same launch
        "out 16 bytes further": ("matmul_all_gather", dict(offset=4), True),
        "out misaligned": ("matmul_all_gather", dict(offset=1), False),
        "fp16 operands": ("all_gather_matmul", dict(dtype=torch.float16), False),
        "a strided A (reduce)": ("matmul_all_reduce", dict(a_view=strided), False),
        "out misaligned (reduce)": ("matmul_all_reduce", dict(offset=1), False),
    }
    for i, (name, check) in enumerate(cases.items()):
        _twice(cache, fails, f"rank {rank}: {name}", lambda round_, check=check, i=i: check(10 * i + round_))
    for what, (name, kwargs, expect_hit) in changes.items():
        hits = cache.hits
        if not cases[name](77, **kwargs):
            fails.append(f"rank {rank}: {what}: wrong result")
        if (cache.hits > hits) != expect_hit:
            fails.append(f"rank {rank}: {what}: hit={cache.hits > hits}")
    # the other ops' workspaces, made since, leave matmul_all_gather's launch standing
    hits = cache.hits
    if not matmul_all_gather(88) or cache.hits == hits:
        fails.append(f"rank {rank}: matmul_all_gather after the other ops: hit={cache.hits > hits}")
    # matmul_all_gather's flags handed out at another shape (zeroed, as a call of another shape would), then the
    # first shape again: a miss (the flags must be zeroed at its shape again), right; and the call after a hit
    ctx.workspaces.get("matmul_all_gather.part_flags", list(range(world)), (999,), torch.int32, zero=True)
    _twice(cache, fails, f"rank {rank}: matmul_all_gather after another shape",
           lambda round_: matmul_all_gather(91 + round_))
    # a hit still refuses an out off the heap where peers store into it
    a, b = torch.ones(m, k // world * world, device=dev), torch.ones(k // world * world, n, device=dev)
    on_heap = ctx.empty(m, n)
    ctx.ops.matmul_all_reduce(on_heap, a, b, config=config)
    ctx.ops.matmul_all_reduce(on_heap, a, b, config=config)
    message = error_message(ctx.ops.matmul_all_reduce, torch.empty(m, n, device=dev), a, b, config=config)
    if "heap" not in message:
        fails.append(f"rank {rank}: an off-heap out on a remembered key: {message}")
    ctx.barrier()
    return fails


def test_fused_ops_remember_their_launches(pools):
    fails = [f for fs in pools(2).run(_fused_calls_body) for f in fs]
    assert not fails, "\n".join(fails)


def test_keys_tell_calls_apart():
    """Everything a launch depends on is in the key; what it does not depend on (the data, the address beyond
    its alignment) is not."""
    a, b = torch.zeros(64), torch.zeros(64)
    config = CollectiveConfig()
    base = launches.key_of("op", None, config, (a, b), "sum")
    assert base == launches.key_of("op", None, config, (torch.ones(64), torch.ones(64)), "sum")
    changed = {
        "shape": (a.view(8, 8), b.view(8, 8)),
        "dtype": (a.view(torch.int32), b.view(torch.int32)),
        "alignment": (torch.zeros(65)[1:], b),
        "aliasing": (a, a),
        "contiguity": (a.view(8, 8).t(), b.view(8, 8)),
    }
    for what, tensors in changed.items():
        assert launches.key_of("op", None, config, tensors, "sum") != base, what
    assert launches.key_of("op", None, CollectiveConfig(), (a, b), "sum") != base  # another config object
    assert launches.key_of("op", None, config, (a, b), "max") != base
    assert launches.key_of("op", None, CollectiveConfig(check=True), (a, b)) is None
    assert launches.key_of("op", None, config, (a, [1.0])) is None  # not a tensor: the general path raises
    assert launches.key_of("op", None, config, (a, b), object()) is None
    assert launches.key_of("op", None, "fast", (a, b)) is not None  # a bad config: the general path raises


class _FakeKernel:
    """A JITFunction stand-in: ``kernel[grid](...)`` records the general path and returns a "compiled" kernel."""

    def __init__(self):
        self.general = []

        def fn(out, inp, n, sync, GROUP_SIZE, OP, BLOCK=64):
            pass

        self.fn = fn

    def __getitem__(self, grid):
        def run(*args, **meta):
            self.general.append((grid, args, meta))
            return "compiled"
        return run


def test_direct_launch_passes_what_triton_would(monkeypatch):
    """After the first (general) call, a hit calls the compiled kernel's C launcher with Triton 3.6's argument
    order: grid, stream, the prefix (function, flags, scratch, metadata, hooks), then every kernel parameter in
    order, the call's tensors first and the constexprs and defaults last; a launch hook or another current
    device sends it back through ``kernel[grid]``."""
    direct, device, hooks = [], [0], [True]
    monkeypatch.setattr(launches.private, "compiled_launcher",
                        lambda compiled: ((lambda *args: direct.append(args)), ("function", 0, 0, None)))
    monkeypatch.setattr(launches.private, "current_device", lambda: device[0])
    monkeypatch.setattr(launches.private, "current_stream", lambda d: 1000 + d)
    monkeypatch.setattr(launches.private, "no_launch_hooks", lambda: hooks[0])
    kernel = _FakeKernel()
    sync = ("flags", "bases", 0, 1)
    launch = launches.Launch(kernel, (4,), (96, sync), dict(GROUP_SIZE=2, OP="sum", num_warps=8))
    launch("out0", "inp0")
    assert kernel.general == [((4,), ("out0", "inp0", 96, sync), dict(GROUP_SIZE=2, OP="sum", num_warps=8))]
    launch("out1", "inp1")
    assert direct == [(4, 1, 1, 1000, "function", 0, 0, None, "out1", "inp1", 96, sync, 2, "sum", 64)]
    hooks[0] = False
    launch("out2", "inp2")
    device[0] = 1
    hooks[0] = True
    launch("out3", "inp3")
    assert [args[:2] for _, args, _ in kernel.general[1:]] == [("out2", "inp2"), ("out3", "inp3")]
    assert len(direct) == 1


def test_sliced_direct_launch_passes_the_slice_address(monkeypatch):
    """reduce_scatter's pull: the general path gets the slice as a tensor, the direct launch its address (what
    Triton's launcher reads from a tensor's ``data_ptr()``), the same bytes."""
    direct = []
    monkeypatch.setattr(launches.private, "compiled_launcher",
                        lambda compiled: ((lambda *args: direct.append(args)), ("function",)))
    monkeypatch.setattr(launches.private, "current_device", lambda: 0)
    monkeypatch.setattr(launches.private, "current_stream", lambda d: 7)
    monkeypatch.setattr(launches.private, "no_launch_hooks", lambda: True)
    kernel = _FakeKernel()
    launch = launches.SlicedLaunch(kernel, (2,), (5, "sync"), dict(GROUP_SIZE=2, OP="sum"), 10, 15)
    out, inp = torch.zeros(5), torch.arange(40.0).view(2, 20)
    launch(out, inp)
    general = kernel.general[0][1][1]
    assert general.data_ptr() == inp.data_ptr() + 10 * 4 and general.tolist() == [10.0, 11.0, 12.0, 13.0, 14.0]
    launch(out, inp)
    assert direct == [(2, 1, 1, 7, "function", out, inp.data_ptr() + 10 * 4, 5, "sync", 2, "sum", 64)]


def test_launch_hooks_are_seen():
    """A profiler's launch hook sends remembered launches back through Triton's path (which calls it)."""
    from triton import knobs

    from iris.platform import private

    assert private.no_launch_hooks()
    hook = lambda metadata: None  # noqa: E731
    knobs.runtime.launch_enter_hook.add(hook)
    try:
        assert not private.no_launch_hooks()
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)
    assert private.no_launch_hooks()


def _allocation_body():
    """The allocation path: each tensor owns its bytes until its last alias goes, whatever made the alias."""
    ctx = new_context(1 << 22)
    heap, fails = ctx.heap, []
    t = ctx.empty(64, 16, dtype=torch.bfloat16)
    if t.shape != (64, 16) or t.dtype != torch.bfloat16 or not ctx.is_symmetric(t):
        fails.append(f"ctx.empty gave {tuple(t.shape)} {t.dtype}")
    offset = heap.offset_of(t)
    t.fill_(3)
    aliases = [t.data, t.view(-1)[5:], torch.empty(0, dtype=torch.bfloat16, device=t.device).set_(t.untyped_storage())]
    del t
    gc.collect()
    heap.reclaim()
    if offset not in heap._allocator.used:
        fails.append("the bytes were freed while aliases of the tensor lived")
    if not all(bool((a == 3).all()) for a in aliases):
        fails.append("an alias lost its data")
    del aliases
    gc.collect()
    heap.reclaim()
    if offset in heap._allocator.used:
        fails.append("the bytes were not freed once the last alias went")
    for size, dtype in [((), torch.float32), ((0,), torch.float16), ((3, 0, 2), torch.int64), ((5,), torch.int8)]:
        x = ctx.empty(size, dtype=dtype)
        if tuple(x.shape) != size or x.dtype != dtype:
            fails.append(f"ctx.empty{size} {dtype} gave {tuple(x.shape)} {x.dtype}")
    if "negative dimension" not in error_message(ctx.empty, 3, -1):
        fails.append(f"a negative size: {error_message(ctx.empty, 3, -1)}")
    return fails


def test_allocations_own_their_bytes_until_the_last_alias(pools):
    fails = [f for fs in pools(2).run(_allocation_body) for f in fs]
    assert not fails, "\n".join(fails)


def _torch_paths_body():
    """The "iris" backend's all_reduce and torch.ops.iris.all_reduce, repeated: a remembered route (tensors on the
    heap as they are, or one staged chunk) gives the general path's result, and a change of shape, dtype or
    placement (heap or not) is picked up."""
    import iris.compile
    import iris.distributed

    ctx = new_context(1 << 22)
    iris.distributed.set_context(ctx)
    iris.compile.set_context(ctx)
    group = dist.new_group(backend="iris")
    rank, world, dev, fails = ctx.get_rank(), ctx.get_num_ranks(), ctx.get_device(), []
    cases = [((37, 7), torch.float32, False), ((37, 7), torch.float32, True), ((7, 37), torch.float32, False),
             ((37, 7), torch.bfloat16, False), ((37, 7), torch.float32, False), ((37, 7), torch.float32, True)]
    for round_, (shape, dtype, on_heap) in enumerate(cases):  # the last two repeat the first two
        xs = [_data(r, shape, dtype, salt=round_) for r in range(world)]
        t = ctx.empty(shape, dtype=dtype).copy_(xs[rank]) if on_heap else xs[rank].to(dev, copy=True)
        ctx.barrier()
        dist.all_reduce(t, group=group)
        if not _close(t, ref_ops.all_reduce(xs, "sum")):
            fails.append(f"rank {rank}: dist.all_reduce {shape} {dtype} on_heap={on_heap} round {round_}")
        y = torch.ops.iris.all_reduce(xs[rank].to(dev))
        if not _close(y, ref_ops.all_reduce(xs, "sum")):
            fails.append(f"rank {rank}: torch.ops.iris.all_reduce {shape} {dtype} round {round_}")
    # torch.ops.iris stages every call: rounds 1, 4 and 5 repeat round 0's route
    if ctx.integrations["compile"].hits != 3:
        fails.append(f"rank {rank}: torch.ops.iris took {ctx.integrations['compile'].hits} remembered routes, not 3")
    ctx.barrier()
    return fails


def test_torch_paths_remember_their_routes(pools):
    fails = [f for fs in pools(2).run(_torch_paths_body) for f in fs]
    assert not fails, "\n".join(fails)
