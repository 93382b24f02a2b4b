"""Fused GEMM + communication ops against their float64 torch references: every op, fused and bulk
variants, odd K, 2 and 4 ranks, bias, and bad input."""

import contextlib
import os
from types import SimpleNamespace

import pytest
import torch
import triton
import triton.language as tl

from conftest import on_gpu, world_sizes
from iris.ops import OpsConfig
from iris.host.copy_engine import schedule as copy_schedule
from iris.ops import reference as ref_ops
from iris.ops.gemm import first_unit, stream_program, stream_share
from iris.ops.reduce_ops import _unit
from rank_utils import GPU_SCALE, SEED, error_message, new_context, on_stream, warmed_graph

# Relative error (Frobenius) against float64: fp32 goes through tf32 on GPUs; bf16 keeps 8 bits.
TOLERANCE = {torch.float32: 5e-3, torch.float16: 5e-3, torch.bfloat16: 2e-2}
DTYPES = [torch.float32, torch.float16, torch.bfloat16]
M_LOCAL, N_LOCAL, K = (1024, 512, 1000) if GPU_SCALE else (64, 32, 40)  # K is not a multiple of the block
# The small sizes on a GPU (as compute-sanitizer runs them) take the interpreter's tiles: the GPU's 128-row
# tiles do not divide M / W = 64 there, and the fused variant would be refused.
TILES = {} if GPU_SCALE else dict(block_m=32, block_n=32, block_k=32)


def config(variant, **kwargs):
    return OpsConfig(variant=variant, **TILES, **kwargs)


def operand(rank, shape, dtype, salt):
    return torch.randn(shape, generator=torch.Generator().manual_seed(SEED + 31 * salt + rank)).to(dtype)


def mismatch(name, tri, ref):
    err = ((tri.cpu().double() - ref).norm() / ref.norm()).item()
    return None if err <= TOLERANCE[tri.dtype] else f"{name}: relative error {err:.2e}"


def leftover_flags(ctx, name):
    """The largest value left in the op's workspace flags ``name`` (of every shape): 0 once each was consumed, as
    a replayed CUDA graph needs (it writes the values it was captured with)."""
    return max((int(t.max()) for t in ctx.workspaces.views(name)), default=0)


@contextlib.contextmanager
def band_bytes(value):
    """Copy-engine bands of at most ``value`` bytes (``copy_schedule.BAND_BYTES``, read at each call): 1 cuts the
    interpreter's small outputs into bands of one tile column, so that several bands leave per row of tiles."""
    kept = copy_schedule.BAND_BYTES
    copy_schedule.BAND_BYTES = value
    try:
        yield
    finally:
        copy_schedule.BAND_BYTES = kept


def _ops_body(dtype):
    # the reduce ops' staging and outbox hold W row blocks each, and out grows with W: the heap grows with it
    ctx = new_context((1 << 29 if GPU_SCALE else 1 << 21) * int(os.environ["WORLD_SIZE"]))
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    dev = ctx.get_device()
    M, N = world * M_LOCAL, world * N_LOCAL
    fails = []
    bias = operand(0, (N,), dtype, 9)

    # matmul_all_gather: A [M, K] shared, B_r [K, N / W]
    a_full = operand(0, (M, K), dtype, 1)
    b_cols = [operand(r, (K, N_LOCAL), dtype, 2) for r in range(world)]
    out = ctx.empty(M, N, dtype=dtype)
    # (asked for the copy engines, a problem of one wave leaves every tile to the SMs, the last wave's way; the
    # copy engines' bands are checked in _split_tail_body)
    for name, chosen in (("fused", config("fused")), ("bulk", config("bulk")),
                         ("fused, copy engine asked", config("fused", copy_engine=True))):
        out.fill_(float("nan"))
        ctx.barrier()
        ctx.ops.matmul_all_gather(out, a_full.to(dev), b_cols[rank].to(dev), config=chosen)
        ctx.barrier()
        fails.append(mismatch(f"matmul_all_gather {name}", out, ref_ops.matmul_all_gather(a_full, b_cols)))

    # all_gather_matmul: A_r [M / W, K] anywhere, B [K, N] shared; fused again and again with fresh A, so flags
    # left by one call must not release the next call's GEMM early; each way the rows move (the copy engines in
    # chunks of one row block too, so that a rank's rows arrive in several)
    b_full = operand(0, (K, N), dtype, 4)
    result = torch.empty(M, N, dtype=dtype, device=dev)
    sm, engines = dict(copy_engine=False), dict(copy_engine=True)
    for variant, salt, options in (("fused", 3, sm), ("fused", 10, sm), ("bulk", 11, {}), ("fused", 12, sm),
                                   ("fused", 15, engines), ("fused", 16, engines),
                                   ("fused", 17, dict(copy_engine=True, group_m=1))):
        a_rows = [operand(r, (M_LOCAL, K), dtype, salt) for r in range(world)]
        result.fill_(float("nan"))
        ctx.ops.all_gather_matmul(result, a_rows[rank].to(dev), b_full.to(dev), config=config(variant, **options))
        fails.append(mismatch(f"all_gather_matmul {variant} ({salt}, {options})", result,
                              ref_ops.all_gather_matmul(a_rows, b_full)))
    for name in ("all_gather_matmul.arrived", "all_gather_matmul.go"):
        left = leftover_flags(ctx, name)
        fails.append(None if left == 0 else f"all_gather_matmul left {name} at {left}")

    # matmul_all_reduce / matmul_reduce_scatter: A_r [M, K / W], B_r [K / W, N]
    a_k = [operand(r, (M, K), dtype, 5) for r in range(world)]
    b_k = [operand(r, (K, N), dtype, 6) for r in range(world)]
    reduced_ref = ref_ops.matmul_all_reduce(a_k, b_k)
    scattered_ref = ref_ops.matmul_reduce_scatter(a_k, b_k, rank)
    off_heap = torch.empty(M, N, dtype=dtype, device=dev)
    on_heap = ctx.empty(M, N, dtype=dtype)
    scattered = torch.empty(M_LOCAL, N, dtype=dtype, device=dev)
    for variant in ("fused", "bulk"):
        chosen = config(variant)
        for reduced in ((on_heap, off_heap) if variant == "bulk" else (on_heap,)):
            reduced.fill_(float("nan"))
            ctx.barrier()
            # the reference API's form: the context passed once more
            ctx.ops.matmul_all_reduce(reduced, a_k[rank].to(dev), b_k[rank].to(dev), ctx, bias=bias.to(dev),
                                      config=chosen)
            fails.append(mismatch(f"matmul_all_reduce {variant}", reduced, reduced_ref + bias.double()))
        scattered.fill_(float("nan"))
        ctx.ops.matmul_reduce_scatter(scattered, a_k[rank].to(dev), b_k[rank].to(dev), config=chosen)
        fails.append(mismatch(f"matmul_reduce_scatter {variant}", scattered, scattered_ref))
    # through the copy engines, with bands of one tile row, and of one tile column (bands of 1 byte at most), so
    # that all_reduce's first reduced band goes by the engines and its last from the SMs
    for options, band in ((dict(copy_engine=True), None), (dict(copy_engine=True, group_m=1), None),
                          (dict(copy_engine=True, group_m=2), 1)):
        chosen, named = config("fused", **options), ", ".join(f"{k}={v}" for k, v in options.items())
        with band_bytes(band or copy_schedule.BAND_BYTES):
            on_heap.fill_(float("nan"))
            ctx.barrier()
            ctx.ops.matmul_all_reduce(on_heap, a_k[rank].to(dev), b_k[rank].to(dev), config=chosen)
            fails.append(mismatch(f"matmul_all_reduce fused, {named}, bands of {band}", on_heap, reduced_ref))
            scattered.fill_(float("nan"))
            ctx.ops.matmul_reduce_scatter(scattered, a_k[rank].to(dev), b_k[rank].to(dev), config=chosen)
            fails.append(mismatch(f"matmul_reduce_scatter fused, {named}, bands of {band}", scattered,
                                  scattered_ref))
    # twice more each way, fused: per-tile (per-band) flags from the last call must not let this one read stale
    # partials
    for salt, copy_engine in ((7, False), (8, False), (13, True), (14, True)):
        a_k = [operand(r, (M, K), dtype, salt) for r in range(world)]
        scattered.fill_(float("nan"))
        ctx.ops.matmul_reduce_scatter(scattered, a_k[rank].to(dev), b_k[rank].to(dev),
                                      config=config("fused", copy_engine=copy_engine))
        fails.append(mismatch(f"matmul_reduce_scatter again ({salt}, copy_engine={copy_engine})", scattered,
                              ref_ops.matmul_reduce_scatter(a_k, b_k, rank)))
    for name in ("ops.matmul_reduce_scatter.band_flags", "ops.matmul_all_reduce.band_flags",
                 "ops.matmul_all_reduce.sent"):
        left = leftover_flags(ctx, name)
        fails.append(None if left == 0 else f"{name} left at {left}")
    ctx.barrier()
    return [f for f in fails if f]


def _records_body():
    """Every fused op's record run as it declares itself: operands of its layout's shapes, different on every rank,
    into a poisoned ``out`` on the heap, fused and bulk, against its reference."""
    from iris.ops import record

    ctx = new_context(1 << 29 if GPU_SCALE else 1 << 22)
    rank, world, dev = ctx.get_rank(), ctx.get_num_ranks(), ctx.get_device()
    fails = []
    for salt, op in enumerate(record.records()):
        a_shape, b_shape, out_shape = op.shapes(M=world * M_LOCAL, N=world * N_LOCAL, K=K, W=world)
        a = [operand(r, a_shape, torch.float32, 70 + salt) for r in range(world)]
        b = [operand(r, b_shape, torch.float32, 80 + salt) for r in range(world)]
        out = ctx.empty(*out_shape)
        for variant in ("fused", "bulk"):
            out.fill_(float("nan"))
            ctx.barrier()
            getattr(ctx.ops, op.name)(out, a[rank].to(dev), b[rank].to(dev), config=config(variant))
            ctx.barrier()
            fails.append(mismatch(f"{op.name} {variant} ({op.layout})", out, op.reference(a, b, rank)))
    return [f for f in fails if f]


def test_every_fused_record_against_its_reference(pools):
    for rank, fails in enumerate(pools(2).run(_records_body)):
        assert not fails, f"rank {rank}: " + "\n".join(fails)


@pytest.mark.parametrize("world_size", world_sizes())
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fused_ops(pools, world_size, dtype):
    # the interpreter's work grows with the ranks (out and the gathered operands are W slices): 643 s at 8 ranks
    # on a 2-core machine, so the limit grows with them
    results = pools(world_size).run(_ops_body, dtype, timeout_s=150 * max(world_size, 4))
    fails = [f"rank {r}: {f}" for r, fs in enumerate(results) for f in fs]
    assert not fails, "\n".join(fails)


def _spare_sm_body():
    """The SM every fused op leaves its copy queue where ranks share a GPU (the driver's same-GPU copies need one:
    ``copy_schedule.copy_sms``), none without the queue: each op's ``spare`` argument to its grid, recorded with the
    context marked as sharing a GPU by hand (the cpu backend's ranks never do; its grid ignores ``spare``), and
    each result checked."""
    import importlib

    ctx = new_context(1 << 26 if GPU_SCALE else 1 << 23)  # out and the reduced rows: 12 MiB at GPU size
    ctx.shares_gpu = True
    rank, world, dev = ctx.get_rank(), ctx.get_num_ranks(), ctx.get_device()
    modules = [importlib.import_module(f"iris.ops.{name}")
               for name in ("matmul_all_gather", "all_gather_matmul", "reduce_ops")]
    grids = [module.num_programs for module in modules]
    spares = []

    def recording(grid):
        def num_programs(device, tiles, spare=0, **kwargs):
            spares.append(spare)
            return grid(device, tiles, spare, **kwargs)
        return num_programs

    a = [operand(r, (world * M_LOCAL, K), torch.float32, 60) for r in range(world)]
    b = [operand(r, (K, N_LOCAL), torch.float32, 61) for r in range(world)]
    out, reduced = ctx.empty(world * M_LOCAL, world * N_LOCAL), ctx.empty(world * M_LOCAL, N_LOCAL)
    stacked, scattered = torch.empty(world * M_LOCAL, N_LOCAL, device=dev), torch.empty(M_LOCAL, N_LOCAL, device=dev)
    rows = [x[:M_LOCAL] for x in a]
    cases = (
        ("matmul_all_gather", lambda c: ctx.ops.matmul_all_gather(out, a[0].to(dev), b[rank].to(dev), config=c), out,
         lambda: ref_ops.matmul_all_gather(a[0], b)),
        ("all_gather_matmul", lambda c: ctx.ops.all_gather_matmul(stacked, rows[rank].to(dev), b[0].to(dev), config=c),
         stacked, lambda: ref_ops.all_gather_matmul(rows, b[0])),
        ("matmul_reduce_scatter", lambda c: ctx.ops.matmul_reduce_scatter(scattered, a[rank].to(dev), b[rank].to(dev),
                                                                          config=c),
         scattered, lambda: ref_ops.matmul_reduce_scatter(a, b, rank)),
        ("matmul_all_reduce", lambda c: ctx.ops.matmul_all_reduce(reduced, a[rank].to(dev), b[rank].to(dev), config=c),
         reduced, lambda: ref_ops.matmul_all_reduce(a, b)),
    )
    found, fails = {}, []
    for module, grid in zip(modules, grids):
        module.num_programs = recording(grid)
    try:
        for copy_engine in (False, True):
            for name, call, result, reference in cases:
                spares.clear()
                result.fill_(float("nan"))
                ctx.barrier()
                call(config("fused", copy_engine=copy_engine))
                ctx.barrier()
                found[name, copy_engine] = list(spares)
                fails.append(mismatch(f"{name} copy_engine={copy_engine} on a shared GPU", result, reference()))
    finally:
        for module, grid in zip(modules, grids):
            module.num_programs = grid
    return found, [f for f in fails if f]


def test_fused_grids_leave_an_sm_to_same_gpu_copies(pools):
    for found, fails in pools(2).run(_spare_sm_body):
        assert not fails, "\n".join(fails)
        for (name, copy_engine), spares in found.items():
            assert spares == [1 if copy_engine else 0], (name, copy_engine, spares)


def _bad_input_body():
    ctx = new_context()
    a, b = ctx.zeros(64, 40), ctx.zeros(40, 32)
    out = ctx.zeros(64, 64)
    return {
        "inner": error_message(ctx.ops.matmul_all_gather, out, a, ctx.zeros(30, 32)),
        "out_shape": error_message(ctx.ops.matmul_all_gather, ctx.zeros(64, 50), a, b),
        "not_heap": error_message(ctx.ops.matmul_all_gather, torch.zeros(64, 64, device=ctx.get_device()), a, b),
        "dtype": error_message(ctx.ops.matmul_all_reduce, ctx.zeros(64, 32), a.half(), b),
        "divisible": error_message(ctx.ops.matmul_reduce_scatter, ctx.zeros(33, 32), ctx.zeros(65, 40), b),
        "fused_block": error_message(ctx.ops.all_gather_matmul, ctx.zeros(96, 32), ctx.zeros(48, 40), b,
                                     config=OpsConfig(variant="fused", block_m=32)),
        "fused_out": error_message(ctx.ops.matmul_all_reduce, torch.zeros(64, 32, device=ctx.get_device()), a, b,
                                   config=OpsConfig(variant="fused")),
        "config": error_message(OpsConfig, block_m=48),
        # M or N of 0 on every rank: an empty result, as torch.matmul gives, whatever the variant
        "empty": {(name, variant, shape): error_message(getattr(ctx.ops, name), ctx.zeros(*shape), ctx.ones(
            shape[0] * (2 if name == "matmul_reduce_scatter" else 1) // (2 if name == "all_gather_matmul" else 1), 40),
            ctx.ones(40, shape[1] // (2 if name == "matmul_all_gather" else 1)), config=OpsConfig(variant=variant))
            for name in ("matmul_all_reduce", "matmul_reduce_scatter", "all_gather_matmul", "matmul_all_gather")
            for variant in ("fused", "bulk") for shape in ((0, 32), (32, 0))},
    }


def test_bad_input(pools):
    r = pools(2).run(_bad_input_body)[0]
    assert "ops.matmul_all_gather: A is (64, 40) and B is (30, 32): inner dimensions differ" in r["inner"]
    assert "ops.matmul_all_gather: out is (64, 50), expected (64, 64)" in r["out_shape"]
    assert "ops.matmul_all_gather: out is not on the symmetric heap" in r["not_heap"]
    assert "ops.matmul_all_reduce: A, B and out must share a dtype" in r["dtype"]
    assert "ops.matmul_reduce_scatter: M (rows of A) = 65 is not divisible by the world size 2" in r["divisible"]
    assert "the fused variant needs block_m=32 to divide M / W = 48" in r["fused_block"]
    assert "ops.matmul_all_reduce: the fused variant needs" in r["fused_out"]
    assert "out on the symmetric heap (peers store the reduced tiles into it)" in r["fused_out"]
    assert "OpsConfig: block_m=48 must be a power of two >= 16" in r["config"]
    assert set(r["empty"].values()) == {"no error"}, r["empty"]


def _subgroup_ops_body(dtype):
    """4 ranks: pairs {0,1},{2,3}, then {0,2},{1,3}, then the first pairs again, each call with fresh operands.
    Per-call flags and staging must belong to one group: a rank that meets another group must not take the
    flags left by the previous one for this call's."""
    import torch.distributed as dist

    ctx = new_context(1 << 30 if GPU_SCALE else 1 << 22)
    rank, dev = ctx.get_rank(), ctx.get_device()
    pairings = [[[0, 1], [2, 3]], [[0, 2], [1, 3]]]
    groups = [[dist.new_group(pair) for pair in pairing] for pairing in pairings]  # every rank makes every group
    fused = config("fused")
    fails = []
    for step, which in enumerate((0, 1, 0, 1)):
        pair = next(p for p in pairings[which] if rank in p)
        group = groups[which][pairings[which].index(pair)]
        a_k = {r: operand(r, (2 * M_LOCAL, K), dtype, 20 + step) for r in pair}
        b_k = {r: operand(r, (K, N_LOCAL), dtype, 30 + step) for r in pair}
        out = torch.full((M_LOCAL, N_LOCAL), float("nan"), dtype=dtype, device=dev)
        ctx.ops.matmul_reduce_scatter(out, a_k[rank].to(dev), b_k[rank].to(dev), group=group, config=fused)
        fails.append(mismatch(f"step {step} {pair} matmul_reduce_scatter", out,
                              ref_ops.matmul_reduce_scatter([a_k[r] for r in pair], [b_k[r] for r in pair],
                                                            pair.index(rank))))
        a_rows = {r: operand(r, (M_LOCAL, K), dtype, 40 + step) for r in pair}
        b_full = operand(0, (K, N_LOCAL), dtype, 50 + step)
        gathered = torch.full((2 * M_LOCAL, N_LOCAL), float("nan"), dtype=dtype, device=dev)
        ctx.ops.all_gather_matmul(gathered, a_rows[rank].to(dev), b_full.to(dev), group=group, config=fused)
        fails.append(mismatch(f"step {step} {pair} all_gather_matmul", gathered,
                              ref_ops.all_gather_matmul([a_rows[r] for r in pair], b_full)))
    ctx.barrier()
    return [f for f in fails if f]


@pytest.mark.skipif(4 not in world_sizes(), reason="needs 4 ranks (on 2 GPUs: IRIS_TEST_WORLD_SIZES=2,4 with "
                    "IRIS_BACKEND=simulation)")
def test_fused_ops_in_changing_subgroups(pools):
    results = pools(4).run(_subgroup_ops_body, torch.float32)
    fails = [f"rank {r}: {f}" for r, fs in enumerate(results) for f in fs]
    assert not fails, "\n".join(fails)


def _split_tail_body(programs=None, engines_only=False):
    """matmul_all_gather with one output tile column and two whole waves of row tiles and part of a third: the
    last wave's tiles' K steps are shared by the programs (stream-K) and summed in a workspace. ``programs``
    replaces the grid (5: 2 tail tiles of 8 K steps over 5 programs, so that the middle program finishes the
    first tail tile and starts the second, which the cpu backend's 4 programs never do). ``engines_only``: only
    the cases in which the copy engines carry the first band."""
    import importlib

    from iris.ops.gemm import split_tail

    module = importlib.import_module("iris.ops.matmul_all_gather")  # the module, not the op it exports
    grid = module.num_programs
    ctx = new_context(1 << 30 if GPU_SCALE else 1 << 22)
    rank, world, dev = ctx.get_rank(), ctx.get_num_ranks(), ctx.get_device()
    dtype = torch.bfloat16 if GPU_SCALE else torch.float32
    block_m, block_n, block_k = OpsConfig().blocks(dev.type, dtype)
    programs = programs or grid(dev, 1 << 20)
    # a last wave of ~3/10 of the programs: its 8-step tiles shared unevenly, so that on an H200 (39 tiles over
    # 132 programs) most shares finish one tile and start the next; on the cpu backend 2 tiles over 4 programs
    row_tiles = 2 * programs + max(2, programs * 3 // 10)
    M, K = row_tiles * block_m, 8 * block_k
    full, stream = split_tail(row_tiles, programs, 8)
    out = ctx.empty(M, world * block_n, dtype=dtype)
    fails = [None if stream > 0 else f"no stream-K wave: {row_tiles} tiles over {programs} programs"]
    if programs == 5:
        fails.append(None if (full, stream) == (10, 5) else f"5 programs: {(full, stream)}, not (10, 5)")
    module.num_programs = lambda device, tiles, spare=0, sms=None: min(tiles, programs - spare)
    try:
        # twice with fresh operands (a flag left raised would add a stale partial), then through the copy engines
        # (band counts and flags reused), the last time over two tile columns in bands of one (bands of 1 byte at
        # most) and two tile rows
        wide = ctx.empty(M, 2 * world * block_n, dtype=dtype)
        cases = ((20, False, 1), (21, False, 1), (24, True, 1), (25, True, 1), (26, True, 2))
        for salt, copy_engine, columns in cases:
            if engines_only and not copy_engine:
                continue
            a = operand(0, (M, K), dtype, salt)
            b_cols = [operand(r, (K, columns * block_n), dtype, salt + 1) for r in range(world)]
            out = wide if columns == 2 else out
            out.fill_(float("nan"))
            ctx.barrier()
            narrow = dict(group_m=2) if columns == 2 else {}
            with band_bytes(1 if columns == 2 else copy_schedule.BAND_BYTES):
                ctx.ops.matmul_all_gather(out, a.to(dev), b_cols[rank].to(dev),
                                          config=OpsConfig(variant="fused", copy_engine=copy_engine, **narrow))
            ctx.barrier()
            fails.append(mismatch(f"matmul_all_gather copy_engine={copy_engine} ({salt}, {stream} of {programs} "
                                  "programs in the last wave)", out, ref_ops.matmul_all_gather(a, b_cols)))
        left = leftover_flags(ctx, "matmul_all_gather.sent")
        fails.append(None if left == 0 else f"matmul_all_gather left a sent flag at {left}")
    finally:
        module.num_programs = grid
    return [f for f in fails if f]


def test_split_last_wave_sums_every_part(pools):
    results = pools(2).run(_split_tail_body) + pools(2).run(_split_tail_body, 5)
    fails = [f"rank {r % 2}: {f}" for r, fs in enumerate(results) for f in fs]
    assert not fails, "\n".join(fails)


def test_copy_engines_carry_bands_to_three_peers(pools):
    # four ranks: each band goes to three peers' out, and each rank waits for three "sent" flags
    results = pools(4).run(_split_tail_body, None, True)
    fails = [f"rank {r}: {f}" for r, fs in enumerate(results) for f in fs]
    assert not fails, "\n".join(fails)


@triton.jit
def _walk_table(steps, tiles_of, n, tiles, lag, GROUP_SIZE: tl.constexpr):
    for u in range(0, n):
        step, tile = _unit(u, tiles, lag, GROUP_SIZE)
        tl.store(steps + u, step)
        tl.store(tiles_of + u, tile)


@pytest.mark.parametrize("group_size", [2, 3, 4])
def test_reduce_walk_trails_by_the_lag(group_size):
    """The fused reduce's walk: every (block, tile) unit once, and each tile's own unit right after the peer
    units of the tile ``lag`` later (every peer unit first at lag = tiles)."""
    tiles, n = 5, group_size * 5
    device = "cuda" if on_gpu() else "cpu"
    for lag in range(tiles + 1):
        steps = torch.full((n,), -1, dtype=torch.int32, device=device)
        tiles_of = torch.full((n,), -1, dtype=torch.int32, device=device)
        _walk_table[(1,)](steps, tiles_of, n, tiles, lag, GROUP_SIZE=group_size)
        units = list(zip(steps.tolist(), tiles_of.tolist()))
        assert sorted(units) == [(s, t) for s in range(1, group_size + 1) for t in range(tiles)], (lag, units)
        own = {t: u for u, (s, t) in enumerate(units) if s == group_size}
        last_peer = {t: max(u for u, (s, q) in enumerate(units) if q == t and s < group_size) for t in range(tiles)}
        for t in range(tiles):
            assert own[t] > last_peer[t], (lag, units)
            if t + lag < tiles:
                assert own[t] == last_peer[t + lag] + 1, (lag, units)
        if lag == tiles:
            assert min(own.values()) > max(last_peer.values()), units


@triton.jit
def _deal_table(firsts, programs, bounds, BOUNDS: tl.constexpr):
    for p in range(0, programs):
        for i in range(0, BOUNDS):
            tl.store(firsts + p * BOUNDS + i, first_unit(p, programs, tl.load(bounds + i)))


def test_loops_split_at_any_bound_continue_one_deal():
    """Loops over [0, b1), [b1, b2), ... that each start at ``first_unit`` give every program the indices one
    round-robin deal over the whole range would (the copy-engine walks: peer units, then two kinds of own unit)."""
    device = "cuda" if on_gpu() else "cpu"
    programs, end = 7, 40
    cuts = [0, 3, 7, 8, 13, 21, 22, 39, 40]
    bounds = torch.tensor(cuts, dtype=torch.int32, device=device)
    firsts = torch.full((programs * len(cuts),), -1, dtype=torch.int32, device=device)
    _deal_table[(1,)](firsts, programs, bounds, BOUNDS=len(cuts))
    firsts = firsts.view(programs, len(cuts)).tolist()
    for p in range(programs):
        dealt = [u for hi, first in zip(cuts[1:], firsts[p]) for u in range(first, hi, programs)]  # loop i: [cut i, hi)
        assert dealt == list(range(p, end, programs)), (p, firsts[p])


def test_split_tail_fills_the_last_wave():
    from iris.ops.gemm import split_tail

    assert split_tail(448, 132, 224) == (396, 132)  # 52 tiles left: their K steps shared by every program
    assert split_tail(148, 132, 4) == (132, 64)     # 16 left: at most 4 programs per tile
    assert split_tail(148, 132, 2) == (132, 32)     # and no more than one per K step
    assert split_tail(250, 132, 64) == (250, 0)     # 118 left: the last wave is mostly full already
    assert split_tail(198, 132, 64) == (132, 132)   # 66 left: shared by every program
    assert split_tail(512, 128, 64) == (512, 0)     # whole waves
    assert split_tail(100, 132, 64) == (100, 0)     # one partial wave: the grid shrinks to the tiles instead
    assert split_tail(133, 132, 1) == (133, 0)      # single-step tiles: nothing to share


@triton.jit
def _stream_table(firsts, stops, owners, programs, stream, tail_steps):
    for p in range(0, programs):
        first, stop = stream_share(p, stream, tail_steps)
        tl.store(firsts + p, first)
        tl.store(stops + p, stop)
    for step in range(0, tail_steps):
        tl.store(owners + step, stream_program(step, stream, tail_steps))


@pytest.mark.parametrize("stream,tail_steps", [(132, 52 * 224), (64, 16 * 4), (7, 7), (5, 23), (128, 130)])
def test_stream_shares_cover_the_tail(stream, tail_steps):
    """The stream-K last wave: the shares tile the tail's K steps in program order, as evenly as integers
    allow, programs past ``stream`` take none, and ``stream_program`` names the share that holds each step."""
    programs = stream + 3
    device = "cuda" if on_gpu() else "cpu"
    firsts, stops = (torch.full((programs,), -1, dtype=torch.int32, device=device) for _ in range(2))
    owners = torch.full((tail_steps,), -1, dtype=torch.int32, device=device)
    _stream_table[(1,)](firsts, stops, owners, programs, stream, tail_steps)
    firsts, stops, owners = firsts.tolist(), stops.tolist(), owners.tolist()
    assert firsts[0] == 0 and stops[stream - 1] == tail_steps
    assert all(stops[p] == firsts[p + 1] for p in range(programs - 1))
    assert {stops[p] - firsts[p] for p in range(stream)} <= {tail_steps // stream, -(-tail_steps // stream)}
    assert all(firsts[p] == stops[p] == tail_steps for p in range(stream, programs))
    assert all(firsts[owners[x]] <= x < stops[owners[x]] for x in range(tail_steps)), owners


def test_copy_engines_by_default_on_gpus_in_pairs_only():
    # the measured choice: 2 GPUs hand the transfers to the copy engines, except in traced calls (whose device
    # trace records scatters only when the SMs do them); larger groups (not yet measured), ranks sharing a GPU
    # (the simulation backend) and the interpreter keep the SMs; an explicit choice holds everywhere
    assert OpsConfig().uses_copy_engine("cuda", 2) is True
    assert OpsConfig().uses_copy_engine("cuda", 2, traced=True) is False
    assert OpsConfig().uses_copy_engine("cuda", 2, shared_gpu=True) is False
    assert OpsConfig().uses_copy_engine("cuda", 4) is False
    assert OpsConfig().uses_copy_engine("cpu", 2) is False
    assert OpsConfig(copy_engine=True).uses_copy_engine("cpu", 4) is True
    assert OpsConfig(copy_engine=False).uses_copy_engine("cuda", 2) is False
    # asked for where ranks share a GPU, the copies are the driver's kernels: the fused grid leaves them an SM
    assert [copy_schedule.copy_sms(SimpleNamespace(shares_gpu=shared), engines)
            for shared in (False, True) for engines in (False, True)] == [0, 0, 0, 1]


def _graph_replay_body(replays, dtype):
    """The copy-engine ops called again and again with fresh operands: on GPUs captured once in a CUDA graph and
    replayed, so each replay must wait for its own copies, not be released by flags a previous replay left (a
    replay repeats the values captured); on the cpu backend called each time. The result is snapshotted on the
    op's stream right after it, before any host barrier. Every op has more tiles than the GPU has SMs, so that its
    grid is as large as it gets: where ranks share a GPU the copies are the driver's kernels, which need the SM the
    grid leaves them (``copy_schedule.copy_sms``)."""
    import importlib

    module = importlib.import_module("iris.ops.matmul_all_gather")
    ctx = new_context(1 << 30 if GPU_SCALE else 1 << 24)
    rank, world, dev = ctx.get_rank(), ctx.get_num_ranks(), ctx.get_device()
    block_m, block_n, block_k = OpsConfig().blocks(dev.type, dtype)
    programs = module.num_programs(dev, 1 << 20)
    engines = OpsConfig(variant="fused", copy_engine=True)
    # matmul_all_gather: three waves of single-column tiles and a part, so most bands go by the copy engines
    M, K = (3 * programs + max(1, programs // 3)) * block_m, 4 * block_k
    a, b = torch.empty(M, K, dtype=dtype, device=dev), torch.empty(K, block_n, dtype=dtype, device=dev)
    out = ctx.empty(M, world * block_n, dtype=dtype)
    # matmul_reduce_scatter: row blocks of 16 tile rows (two bands each), K split over the ranks
    m_local, N, k_slice = 16 * block_m, 2 * block_n, 4 * block_k
    a_k, b_k = torch.empty(world * m_local, k_slice, dtype=dtype, device=dev), \
        torch.empty(k_slice, N, dtype=dtype, device=dev)
    scattered = torch.empty(m_local, N, dtype=dtype, device=dev)
    # matmul_all_reduce: the same row blocks, wide enough on GPUs that a band of ours precedes the last wave
    n_wide = (16 if dev.type == "cuda" else 2) * block_n
    b_wide, reduced = torch.empty(k_slice, n_wide, dtype=dtype, device=dev), ctx.empty(world * m_local, n_wide,
                                                                                         dtype=dtype)
    # all_gather_matmul: two chunks of rows per rank, each waited for
    m_rows, n_cols = 2 * OpsConfig().group_m * block_m, 2 * block_n
    a_rows, b_full = torch.empty(m_rows, K, dtype=dtype, device=dev), torch.empty(K, n_cols, dtype=dtype, device=dev)
    stacked = torch.empty(world * m_rows, n_cols, dtype=dtype, device=dev)
    cases = {  # name -> (call, its result, its operands, a draw of every rank's operands, this rank's, reference)
        "matmul_all_gather": (
            lambda: ctx.ops.matmul_all_gather(out, a, b, config=engines), out, (a, b),
            lambda salt: ([operand(0, (M, K), dtype, salt)],
                          [operand(r, (K, block_n), dtype, salt + 1) for r in range(world)]),
            lambda x, y: (x[0], y[rank]), lambda x, y: ref_ops.matmul_all_gather(x[0], y)),
        "matmul_reduce_scatter": (
            lambda: ctx.ops.matmul_reduce_scatter(scattered, a_k, b_k, config=engines), scattered, (a_k, b_k),
            lambda salt: ([operand(r, (world * m_local, k_slice), dtype, salt) for r in range(world)],
                          [operand(r, (k_slice, N), dtype, salt + 1) for r in range(world)]),
            lambda x, y: (x[rank], y[rank]), lambda x, y: ref_ops.matmul_reduce_scatter(x, y, rank)),
        "matmul_all_reduce": (
            lambda: ctx.ops.matmul_all_reduce(reduced, a_k, b_wide, config=engines), reduced, (a_k, b_wide),
            lambda salt: ([operand(r, (world * m_local, k_slice), dtype, salt) for r in range(world)],
                          [operand(r, (k_slice, n_wide), dtype, salt + 1) for r in range(world)]),
            lambda x, y: (x[rank], y[rank]), lambda x, y: ref_ops.matmul_all_reduce(x, y)),
        "all_gather_matmul": (
            lambda: ctx.ops.all_gather_matmul(stacked, a_rows, b_full, config=engines), stacked, (a_rows, b_full),
            lambda salt: ([operand(r, (m_rows, K), dtype, salt) for r in range(world)],
                          [operand(0, (K, n_cols), dtype, salt + 1)]),
            lambda x, y: (x[rank], y[0]), lambda x, y: ref_ops.all_gather_matmul(x, y[0])),
    }
    stream = torch.cuda.Stream() if dev.type == "cuda" else None
    fails = []
    for name, (call, result, operands, draw, mine, reference) in cases.items():
        for held, value in zip(operands, mine(*draw(40))):
            held.copy_(value.to(dev))
        run = warmed_graph(ctx, call, stream)
        ctx.barrier()
        for i in range(replays):
            x, y = draw(41 + 2 * i)
            for held, value in zip(operands, mine(x, y)):
                held.copy_(value.to(dev))
            result.fill_(float("nan"))
            if stream is not None:
                torch.cuda.synchronize()
            ctx.barrier()
            with on_stream(stream):
                run()
                snapshot = result.clone()  # ordered right after the op on its stream
            if stream is not None:
                torch.cuda.synchronize()
            fails.append(mismatch(f"{name} {'replay' if stream is not None else 'call'} {i}", snapshot,
                                  reference(x, y)))
            ctx.barrier()  # nobody refills operands before every rank has checked
    return [f for f in fails if f]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32] if GPU_SCALE else [torch.float32])
def test_copy_engine_ops_repeat_and_replay_in_cuda_graph(pools, dtype):
    # CUDA graphs on GPUs (replays repeat the values they captured); plain repeated calls on the cpu backend
    results = pools(2).run(_graph_replay_body, 5 if on_gpu() else 2, dtype)
    fails = [f"rank {r}: {f}" for r, fs in enumerate(results) for f in fs]
    assert not fails, "\n".join(fails[:10])
