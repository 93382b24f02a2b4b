"""Code written for upstream Iris: its layouts under its names (ctx.ccl.all_to_all along dim 1, reduce_scatter into
a full-size output by tiles, both shardings of the gather ops) beside torch's under torch's names, upstream's module
paths and config, a dropped context giving its heap back, and AMD-only launch options."""

import gc
import weakref

import pytest
import torch

import iris  # before triton: on the cpu backend this switches Triton to its interpreter
import triton
import triton.language as tl
from triton.language.extra import libdevice

from conftest import on_gpu
from iris.device.utils import read_realtime
from iris.ccl import reference as ref_ops
from iris.ccl.reduce_scatter_tiles import TileLayout, layout_of
from iris.ops import FusedConfig
from iris.ops import reference as ops_ref
from rank_utils import GPU_SCALE, SEED, error_message, new_context

M, N_PER_RANK = (1027, 96) if GPU_SCALE else (37, 5)  # odd rows, columns per rank not a multiple of 16


def data(rank, shape, dtype, salt=0):
    gen = torch.Generator().manual_seed(SEED + 101 * salt + rank)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=gen).to(dtype)
    return torch.randint(-1000, 1000, shape, generator=gen).to(dtype)


def _layouts_body():
    """Data movement exact in int32; the reductions in bf16 (fp32 accumulation) and int32."""
    ctx = new_context(1 << 26 if GPU_SCALE else 1 << 22)
    rank, world, dev = ctx.get_rank(), ctx.get_num_ranks(), ctx.get_device()
    fails = []

    def check(name, tri, ref):
        tri, ref = tri.cpu(), ref.cpu()
        if tri.shape != ref.shape:
            fails.append(f"{name}: shape {tuple(tri.shape)} != {tuple(ref.shape)}")
        elif not tri.dtype.is_floating_point:
            fails.append(None if torch.equal(tri, ref.to(tri.dtype)) else f"{name}: values differ")
        else:
            err = ((tri.double() - ref.double()).norm() / ref.double().norm().clamp_min(1e-30)).item()
            fails.append(None if err <= 8e-3 else f"{name}: relative error {err:.1e}")

    def on_heap(x):
        t = ctx.empty(*x.shape, dtype=x.dtype)
        t.copy_(x)
        return t

    # ---- all_to_all: upstream's (M, N * W) split along dim 1, torch's split along dim 0, 1-D where they agree
    wide = [data(r, (M, N_PER_RANK * world), torch.int32) for r in range(world)]
    inp = on_heap(wide[rank])
    out = ctx.full((M, N_PER_RANK * world), -7, dtype=torch.int32)  # poison
    ctx.barrier()
    ctx.ccl.all_to_all(out, inp)
    ctx.barrier()
    check("all_to_all (dim 1)", out, ref_ops.all_to_all(wide, rank))
    check("all_to_all is upstream's", out, torch.cat([x[:, rank * N_PER_RANK:(rank + 1) * N_PER_RANK] for x in wide], 1))
    rows = [data(r, (world * 3, 4), torch.int32, salt=1) for r in range(world)]
    single = ctx.full((world * 3, 4), -7, dtype=torch.int32)
    ctx.barrier()
    ctx.ccl.all_to_all_single(single, rows[rank].to(dev))
    ctx.barrier()
    check("all_to_all_single (dim 0)", single, ref_ops.all_to_all_single(rows, rank))
    flat = [data(r, (world * 5,), torch.int32, salt=2) for r in range(world)]
    flat_out = ctx.full((world * 5,), -7, dtype=torch.int32)
    ctx.barrier()
    ctx.ccl.all_to_all(flat_out, flat[rank].to(dev))
    ctx.barrier()
    check("all_to_all 1-D", flat_out, ref_ops.all_to_all_single(flat, rank))

    # ---- reduce_scatter into a full-size output: our tiles reduced, every other element kept
    halves = [data(r, (M, N_PER_RANK * world), torch.bfloat16, salt=3) for r in range(world)]
    half_inp, half_out = on_heap(halves[rank]), ctx.empty(M, N_PER_RANK * world, dtype=torch.bfloat16)
    for name, values, src, dst, config in (
            ("default bf16", halves, half_inp, half_out, None),
            ("config blocks int32", wide, inp, out, iris.ccl.Config(block_size_m=8, block_size_n=2)),
            ("config strided bf16", halves, half_inp, half_out,
             iris.ccl.Config(block_size_m=4, block_size_n=4, swizzle_size=2, all_reduce_distribution=0))):
        dst.fill_(-7)
        ctx.barrier()
        ctx.ccl.reduce_scatter(dst, src, config=config)
        ctx.barrier()
        before = torch.full(dst.shape, -7, dtype=dst.dtype)
        check(f"reduce_scatter full-size {name}", dst, ref_ops.reduce_scatter_tiles(values, rank, before,
                                                                                     layout_of(config)))
    tall = [data(r, (M * world, 3), torch.int32, salt=4) for r in range(world)]
    small = ctx.full((M, 3), -7, dtype=torch.int32)
    tall_inp = on_heap(tall[rank])
    ctx.barrier()
    ctx.ccl.reduce_scatter_tensor(small, tall_inp)
    ctx.barrier()
    check("reduce_scatter_tensor", small, ref_ops.reduce_scatter(tall, rank))

    # ---- upstream's Config steers all_reduce; its other variants give the same sums
    for variant, src, dst, values in (("one_shot", half_inp, half_out, halves), ("atomic", inp, out, wide)):
        dst.fill_(-7)
        ctx.barrier()
        ctx.ccl.all_reduce(dst, src, config=iris.ccl.Config(all_reduce_variant=variant))
        ctx.barrier()
        check(f"all_reduce Config({variant})", dst, ref_ops.all_reduce(values))
    return [f for f in fails if f]


def test_upstream_and_torch_layouts(pools):
    for rank, fails in enumerate(pools(3).run(_layouts_body)):  # 3 ranks: odd splits
        assert not fails, f"rank {rank}: " + "; ".join(fails)


def _gather_ops_body():
    ctx = new_context(1 << 24 if GPU_SCALE else 1 << 22)
    rank, world, dev = ctx.get_rank(), ctx.get_num_ranks(), ctx.get_device()
    m, k, n = (256, 128, 192) if GPU_SCALE else (16, 16, 16)
    gen = torch.Generator().manual_seed(SEED)
    a_k = [torch.randn(m, k, generator=gen) for _ in range(world)]      # A sharded along K (upstream)
    a_rows = [torch.randn(m, k, generator=gen) for _ in range(world)]   # A sharded by rows
    b_full = torch.randn(k * world, n, generator=gen)
    b = torch.randn(k, n, generator=gen)
    b_cols = [torch.randn(k, n, generator=gen) for _ in range(world)]  # B sharded by columns (ours)
    bias = [torch.randn(m, generator=gen) for _ in range(world)]
    fails = []

    def check(name, tri, ref):
        err = ((tri.cpu().double() - ref).norm() / ref.norm()).item()
        fails.append(None if err < 1e-5 else f"{name}: relative error {err:.2e}")

    out = ctx.full((m, n), float("nan"))
    ctx.ops.all_gather_matmul(out, a_k[rank].to(dev), b_full.to(dev))
    check("all_gather_matmul, A sharded along K", out, torch.cat([x.double() for x in a_k], 1) @ b_full.double())
    stacked = ctx.full((world * m, n), float("nan"))
    ctx.ops.all_gather_matmul(stacked, a_rows[rank].to(dev), b.to(dev))
    check("all_gather_matmul, A sharded by rows", stacked, ops_ref.all_gather_matmul(a_rows, b))
    gathered = ctx.full((world * m, n), float("nan"))
    ctx.ops.matmul_all_gather(gathered, a_rows[rank].to(dev), b.to(dev), bias[rank].to(dev))
    check("matmul_all_gather, A sharded by rows (+ row bias)", gathered,
          torch.cat([x.double() @ b.double() + y.double()[:, None] for x, y in zip(a_rows, bias)], 0))
    side = ctx.full((m, world * n), float("nan"))
    ctx.ops.matmul_all_gather(side, a_rows[0].to(dev), b_cols[rank].to(dev))
    check("matmul_all_gather, B sharded by columns", side, ops_ref.matmul_all_gather(a_rows[0], b_cols))
    tile = 64 if GPU_SCALE else 16  # not the default tile at either scale, so the config is what ran
    fused = FusedConfig(block_size_m=tile, block_size_n=tile, block_size_k=tile, group_size_m=2, num_xcds=8)
    reduced = ctx.full((m, n), float("nan"))
    ctx.ops.matmul_all_reduce(reduced, a_rows[rank].to(dev), b_cols[rank].to(dev), config=fused)
    check("matmul_all_reduce, upstream's FusedConfig", reduced, ops_ref.matmul_all_reduce(a_rows, b_cols))
    out.fill_(float("nan"))
    ctx.ops.all_gather_matmul(out, a_k[rank].to(dev), b_full.to(dev), config=fused)
    check("all_gather_matmul, upstream's FusedConfig", out, torch.cat([x.double() for x in a_k], 1) @ b_full.double())
    ctx.barrier()
    return [f for f in fails if f]


def test_fused_config_is_upstreams():
    config = FusedConfig()
    assert (config.block_size_m, config.block_size_n, config.block_size_k, config.group_size_m,
            config.all_reduce_variant) == (256, 64, 64, 1, "two_shot")
    ops = config.to_ops_config()
    assert (ops.block_m, ops.block_n, ops.block_k, ops.group_m) == (256, 64, 64, 1)
    with pytest.raises(ValueError, match="all_reduce_variant must be one of"):
        FusedConfig(all_reduce_variant="tree").validate()
    with pytest.raises(ValueError, match="block_size_n .* divisible by world_size"):
        FusedConfig(all_reduce_variant="ring", block_size_n=64).validate(world_size=3)
    with pytest.raises(ValueError, match="block_m=48 must be a power of two"):
        FusedConfig(block_size_m=48).to_ops_config()


def test_ccl_config_takes_upstreams_store_modifier():
    # upstream's example 26 passes cache_modifier on every run (None unless asked)
    assert iris.ccl.Config(cache_modifier=None).collective("ccl.all_gather") == iris.ccl.Config().collective(
        "ccl.all_gather")
    assert iris.ccl.Config(cache_modifier=".wt").cache_modifier == ".wt"
    with pytest.raises(ValueError, match=r"cache_modifier='\.zz'; use None \(each kernel's own\)"):
        iris.ccl.Config(cache_modifier=".zz")


def test_gather_ops_take_both_shardings(pools):
    for rank, fails in enumerate(pools(2).run(_gather_ops_body)):
        assert not fails, f"rank {rank}: " + "; ".join(fails)


def _bad_input_body():
    ctx = new_context()
    changed = iris.ccl.Config()
    changed.block_size_m = 3  # a plain dataclass, as upstream's: checked again where a call reads it
    return {
        "changed": error_message(ctx.ccl.reduce_scatter, ctx.zeros(64, 64), ctx.zeros(64, 64), config=changed),
        "columns": error_message(ctx.ccl.all_to_all, ctx.zeros(4, 5), ctx.zeros(4, 5)),
        "shape": error_message(ctx.ccl.reduce_scatter, ctx.zeros(8, 4), ctx.zeros(4, 8)),
        "block": error_message(iris.ccl.Config, block_size_m=24),
        "config": error_message(ctx.ccl.all_gather, ctx.zeros(8), ctx.zeros(4), config="fast"),
        "row_bias": error_message(ctx.ops.matmul_all_gather, ctx.zeros(8, 4), ctx.ones(4, 4), ctx.ones(4, 4),
                                  ctx.ones(3)),
        # on a GPU, host operands would give the kernel host pointers: refused before anything runs
        "device": error_message(ctx.ops.matmul_all_gather, ctx.zeros(8, 4), ctx.ones(4, 4),
                                torch.ones(4, 4, device="meta")),
    }


def test_bad_input_names_the_layout(pools):
    r = pools(2).run(_bad_input_body)[0]
    assert "ccl.all_to_all: inp has 5 columns along dim 1, which the group of 2 ranks does not divide" in r["columns"]
    assert "use ccl.all_to_all_single" in r["columns"]
    assert "ccl.reduce_scatter: out is (8, 4) but inp is (4, 8)" in r["shape"]
    assert "block_size_m=24 must be a positive power of two" in r["block"]
    assert ("ccl.reduce_scatter: config (iris.ccl.Config, changed since it was made): block_size_m=3 must be a "
            "positive power of two") in r["changed"], r["changed"]
    assert "config must be an iris.ccl.CollectiveConfig or iris.ccl.Config, got str" in r["config"]
    assert "ops.matmul_all_gather: bias is (3,), expected (4,)" in r["row_bias"]
    assert "ops.matmul_all_gather: A is on" in r["device"] and "B on meta" in r["device"], r["device"]


def _dropped_body(compiled):
    """A context used by the collectives (and by torch.ops.iris through torch.compile), then dropped as upstream's
    tests drop theirs: nothing keeps it or its heap."""
    import iris.compile

    ctx = new_context(1 << 22)
    x = ctx.zeros(8, 4)
    x.fill_(ctx.get_rank() + 1.0)
    out = ctx.zeros(8, 4)
    ctx.ccl.all_reduce(out, x)
    ctx.ccl.all_to_all(out, x)
    ctx.ccl.reduce_scatter(out, x)
    if compiled:
        iris.compile.set_context(ctx)
        step = torch.compile(lambda t: torch.ops.iris.all_reduce(t) + 1, backend="aot_eager")
        step(x)
        torch.ops.iris.all_gather(x)
    # the heap's memory, and the group table whose sync flags lie on it (its hooks and the watchdog were a cycle the
    # collector freed only a pass later, keeping the whole heap mapped until then)
    parts = {"context": ctx, "heap": ctx.heap, "heap memory": ctx.heap.memory, "group table": ctx.groups,
             "watchdog": ctx.watchdog}
    refs = {name: weakref.ref(part) for name, part in parts.items()}
    ctx.barrier()
    del ctx, x, out, parts
    gc.collect()  # one pass
    alive = [name for name, ref in refs.items() if ref() is not None]
    if compiled:
        alive += [f"get_context: {error_message(iris.compile.get_context)}"]
    return alive


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "torch.compile"])
def test_dropped_context_is_freed(pools, compiled):
    for alive in pools(2).run(_dropped_body, compiled):
        expected = ["get_context: RuntimeError: iris.compile: Iris context not set; call "
                    "iris.compile.set_context(ctx) on every rank first (ctx = iris.iris(...))"] if compiled else []
        assert alive == expected, alive


@triton.jit
def _stamp(out):
    t0 = read_realtime()
    t1 = read_realtime()
    tl.store(out, t0)
    tl.store(out + 1, t1)


def _realtime_body():
    ctx = new_context()
    out = torch.zeros(2, dtype=torch.int64, device=ctx.get_device())
    _stamp[(1,)](out, waves_per_eu=2, matrix_instr_nonkdim=16, kpack=2)  # AMD-only options are accepted
    ctx.device_barrier()
    flags = ctx._device_barrier_state[None]  # upstream's tests read it: the same flags at every call
    ctx.device_barrier()
    return out.tolist() + [ctx._device_barrier_state[None].data_ptr() == flags.data_ptr()]


def test_upstream_names(pools):
    import iris.compile.functional as functional
    import iris.mem.triton
    from iris.mem.triton.context import Context

    assert iris.hip.get_num_xcc() == 1 and iris.hip.get_wall_clock_rate(0) == 1_000_000
    assert Context is iris.DeviceContext and iris.mem.triton.load is iris.load
    assert iris.mem.utils.read_realtime is iris.device.utils.read_realtime
    from iris.device_utils import get_se_id, read_realtime  # the older flat path upstream keeps as a shim

    assert read_realtime is iris.device.utils.read_realtime and get_se_id is iris.device.utils.get_se_id
    gpus = iris.hip.count_devices()
    assert [iris.get_device_id_for_rank(r) for r in range(3)] == [r % gpus if gpus else 0 for r in range(3)]
    with pytest.raises(ValueError, match=r"iris.get_device_id_for_rank: local_rank=-1 must be an int >= 0"):
        iris.get_device_id_for_rank(-1)
    from iris.host.tracing import Tracing  # the host tracing room keeps its path as a package
    from iris.host.tracing.events import TraceEvent  # upstream's path of the event table

    assert TraceEvent is iris.TraceEvent and TraceEvent().put == 3 and callable(Tracing)
    from iris.device.triton.context import DeviceContext  # upstream's newer layout
    from iris.host.logging.logging import IrisFormatter
    from iris.logging import IrisFormatter as older_path

    assert DeviceContext is iris.DeviceContext and IrisFormatter is older_path
    config = iris.ccl.Config()
    assert (config.block_size_m, config.block_size_n, config.swizzle_size, config.num_xcds,
            config.all_reduce_distribution, config.use_gluon) == (32, 64, 4, 1, 1, False)
    assert layout_of(None) == TileLayout(32, 64, 4, 1) == layout_of(config)
    with pytest.raises(TypeError, match="Expected an Iris instance"):
        iris.compile.set_context("not an iris context")
    saved, functional._iris_ctx = functional._iris_ctx, None
    try:
        with pytest.raises(RuntimeError, match="Iris context not set"):
            functional.get_context()
    finally:
        functional._iris_ctx = saved
    t0, t1, same_flags = pools(2).run(_realtime_body)[0]
    assert 0 < t0 <= t1 and same_flags


@triton.jit
def _libdevice_kernel(x, out, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    v = tl.load(x + offs).to(tl.float32)  # CUDA's libdevice takes float32 and float64
    dtype = out.dtype.element_ty
    tl.store(out + offs, libdevice.tanh(v).to(dtype))
    tl.store(out + BLOCK + offs, libdevice.fast_expf(v).to(dtype))
    tl.store(out + 2 * BLOCK + offs, libdevice.erf(v).to(dtype))
    tl.store(out + 3 * BLOCK + offs, libdevice.pow(tl.abs(v), 1.5 + v * 0).to(dtype))


@triton.jit
def _libdevice_missing_kernel(x, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    tl.store(x + offs, libdevice.clz(tl.load(x + offs).to(tl.int32)).to(tl.float32))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_libdevice_in_kernels(dtype):
    """libdevice, which upstream's flash-decode kernels call (``fast_expf``): the compiler's on GPUs, numpy's on the
    cpu backend, where Triton's interpreter calls its stubs and got None."""
    dev = "cuda" if on_gpu() else "cpu"
    block = 64
    x = (torch.arange(block, dtype=torch.float32, device=dev) / 16 - 2).to(dtype)
    out = torch.full((4 * block,), float("nan"), dtype=dtype, device=dev)
    _libdevice_kernel[(1,)](x, out, BLOCK=block)
    w = x.double()
    expected = torch.cat([w.tanh(), w.exp(), torch.erf(w), w.abs() ** 1.5]).to(dtype)
    tol = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}[dtype]
    torch.testing.assert_close(out.cpu(), expected.cpu(), rtol=tol, atol=tol)
    if not on_gpu():  # a libdevice function the cpu backend does not interpret says so, by name
        message = error_message(_libdevice_missing_kernel[(1,)], x.float(), BLOCK=block)
        assert "libdevice.clz" in message and "cpu backend" in message, message
