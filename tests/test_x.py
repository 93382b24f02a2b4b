"""The tile API ``iris.x`` against torch references: every tile collective at 2 and 3 ranks on shapes that are not
multiples of the tile, exact for data movement, bit-exact against a sum in rank order for the deterministic
reductions (and the same bits on every rank), two calls on the same locks, outputs poisoned first."""

import os

import pytest
import torch
import triton
import triton.language as tl

import iris
import iris.x
from iris.x import reference as ref_ops
from rank_utils import GPU_SCALE, SEED, error_message, new_context, poison_value

M, N = (1031, 517) if GPU_SCALE else (21, 19)  # neither a multiple of the tile nor of the ranks
BLOCK_M, BLOCK_N = (64, 64) if GPU_SCALE else (16, 16)
PROGRAMS = 64 if GPU_SCALE else 3  # persistent programs, each walking several tiles
REDUCTIONS = ["atomic", "ring", "one_shot", "two_shot", "spinlock", "reduce_scatter"]
MOVES = ["all_gather_0", "all_gather_1", "all_to_all", "gather"]
# 2 and 3 ranks: an odd group catches a split that only works for powers of two (scripts/gpu_tiles.sh adds 1)
WORLD_SIZES = [int(w) for w in os.environ.get("IRIS_X_WORLD_SIZES", "2,3").split(",")]


@triton.jit
def _reduce_kernel(x, staged, out, locks, context, M, N, stride_m, stride_n, epoch, variant, RANK: tl.constexpr,
                   WORLD_SIZE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    ctx = iris.DeviceContext.initialize(context, RANK, WORLD_SIZE)
    src_view = iris.x.make_tensor_view(staged, M, N, stride_m, stride_n)
    dst_view = iris.x.make_tensor_view(out, M, N, stride_m, stride_n)
    tiles_n = tl.cdiv(N, BLOCK_N)
    for t in range(tl.program_id(0), tl.cdiv(M, BLOCK_M) * tiles_n, tl.num_programs(0)):
        pid_m, pid_n = t // tiles_n, t % tiles_n
        ptrs, mask = iris.x.tile_ptr(x, M, N, stride_m, stride_n, pid_m, pid_n, BLOCK_M, BLOCK_N)
        values = tl.load(ptrs, mask=mask, other=0)  # [BLOCK_M, BLOCK_N]
        tile = iris.x.Tile(pid_m, pid_n, BLOCK_M, BLOCK_N, values)
        # ---- publish our tile where peers read it: staged, then its lock stamped with the call number (ring reads
        # what the host staged before the kernel, with no lock: a store here would race with the peers' reads)
        if variant != 1:
            staged_ptrs, _ = src_view.tile_ptr(tile)
            tl.store(staged_ptrs, values, mask=mask)
            ctx.atomic_xchg(locks + t, epoch, RANK, sem="release", scope="sys")
        if variant == 0:
            iris.x.all_reduce_atomic(tile, dst_view, ctx)
        elif variant == 1:
            iris.x.all_reduce_ring(iris.x.TileView(pid_m, pid_n, BLOCK_M, BLOCK_N), src_view, dst_view, ctx)
        elif variant == 2:
            iris.x.all_reduce_one_shot(tile, src_view, dst_view, locks, ctx, epoch)
        elif variant == 3:
            iris.x.all_reduce_two_shot(tile, src_view, dst_view, locks, RANK, WORLD_SIZE, ctx, epoch)
        elif variant == 4:
            iris.x.all_reduce_spinlock(tile, dst_view, locks + tl.cdiv(M, BLOCK_M) * tiles_n, ctx)
        else:
            iris.x.reduce_scatter(tile, src_view, dst_view, locks, ctx, epoch)


@triton.jit
def _config_kernel(staged, out, context, M, N, stride_m, stride_n, RANK: tl.constexpr, WORLD_SIZE: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, VARIANT: tl.constexpr):
    """``iris.x.all_reduce`` dispatching on an ``AllReduceConfig`` (ring: no locks; a dummy tensor stands in)."""
    ctx = iris.DeviceContext.initialize(context, RANK, WORLD_SIZE)
    config = iris.x.AllReduceConfig(VARIANT, context)
    tile = iris.x.TileView(tl.program_id(0), tl.program_id(1), BLOCK_M, BLOCK_N)
    iris.x.all_reduce(tile, iris.x.make_tensor_view(staged, M, N, stride_m, stride_n),
                      iris.x.make_tensor_view(out, M, N, stride_m, stride_n), config, ctx)


@triton.jit
def _move_kernel(x, out, context, M, N, stride_xm, stride_xn, out_m, out_n, stride_om, stride_on, per_rank, op,
                 RANK: tl.constexpr, WORLD_SIZE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """``x`` [M, N] on every rank, ``out`` [out_m, out_n]. op 0/1: all_gather along dim 0/1; 2: all_to_all with
    ``per_rank`` columns per rank; 3: gather of every rank's tile into row block s of ``out``."""
    ctx = iris.DeviceContext.initialize(context, RANK, WORLD_SIZE)
    src_view = iris.x.make_tensor_view(x, M, N, stride_xm, stride_xn)
    dst_view = iris.x.make_tensor_view(out, out_m, out_n, stride_om, stride_on)
    tiles_n = tl.cdiv(N, BLOCK_N)
    for t in range(tl.program_id(0), tl.cdiv(M, BLOCK_M) * tiles_n, tl.num_programs(0)):
        pid_m, pid_n = t // tiles_n, t % tiles_n
        ptrs, mask = src_view.tile_ptr(iris.x.TileView(pid_m, pid_n, BLOCK_M, BLOCK_N))
        tile = iris.x.Tile(pid_m, pid_n, BLOCK_M, BLOCK_N, tl.load(ptrs, mask=mask, other=0))
        if op == 0:
            iris.x.all_gather(tile, dst_view, 0, ctx)
        elif op == 1:
            iris.x.all_gather(tile, dst_view, 1, ctx)
        elif op == 2:
            iris.x.all_to_all(tile, src_view, dst_view, per_rank, ctx)
        else:
            for s in range(WORLD_SIZE):
                values = iris.x.gather(tile, src_view, s, ctx)
                dst_ptrs, dst_mask = dst_view.offset_tile_ptr(tile, offset_m=s * M, src_mask=mask)
                tl.store(dst_ptrs, values, mask=dst_mask)


def _data(rank, shape, dtype, salt):
    """Normal values, so that the order of a float sum shows in its bits."""
    gen = torch.Generator().manual_seed(SEED + 7919 * salt + rank)
    return torch.randn(shape, generator=gen).to(dtype)


def _rank_order_sum(inputs, base=None, round_each=False):
    """The deterministic schedules' sum: ranks in order 0..W-1 in fp32 (the inputs' dtype for fp32), rounded once to
    the inputs' dtype, or after every add (``round_each``: the spinlock keeps its sums in dst)."""
    dtype = inputs[0].dtype
    acc = None if base is None else base.float()
    for x in inputs:
        acc = x.float() if acc is None else acc + x.float()
        if round_each:
            acc = acc.to(dtype).float()
    return acc.to(dtype)


def _reduce_body(variant, dtype):
    ctx = new_context(1 << 24 if GPU_SCALE else 1 << 21)
    rank, world, dev = ctx.get_rank(), ctx.get_num_ranks(), ctx.get_device()
    tiles = triton.cdiv(M, BLOCK_M) * triton.cdiv(N, BLOCK_N)
    staged = ctx.empty((M, N), dtype=dtype)
    out = ctx.empty((M, N), dtype=dtype)
    locks = ctx.zeros(2 * tiles, dtype=torch.int32)  # the readiness stamps, then the spinlock's turns
    code = REDUCTIONS.index(variant)
    results, fails = [], []
    for call in (1, 2):  # the same locks twice: the first call's stamps and turns must not release the second
        inputs = [_data(r, (M, N), dtype, salt=call) for r in range(world)]
        base = torch.full((M, N), float(poison_value(dtype)), dtype=dtype)
        out.copy_(base.to(dev))  # poison; atomic and spinlock add onto it
        if variant == "ring":  # no locks: every rank's input is staged before the kernel starts
            staged.copy_(inputs[rank].to(dev))
        else:
            staged.fill_(poison_value(dtype))
        ctx.barrier()
        _reduce_kernel[(PROGRAMS,)](inputs[rank].to(dev), staged, out, locks, ctx.get_device_context(), M, N, N, 1,
                                    call, code, RANK=rank, WORLD_SIZE=world, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N)
        ctx.barrier()
        tri = out.cpu()
        if variant == "atomic":
            ref = (base.double() + ref_ops.all_reduce(inputs))
            err = ((tri.double() - ref).norm() / ref.norm()).item()
            if err > (1e-6 if dtype == torch.float32 else 8e-3):
                fails.append(f"call {call}: relative error {err:.2e}")
        else:
            if variant == "spinlock":
                ref = _rank_order_sum(inputs, base, round_each=True)
            else:
                ref = _rank_order_sum(inputs)
            if variant == "reduce_scatter":
                owned = ref_ops.reduce_scatter_mask(M, N, BLOCK_M, BLOCK_N, rank, world)
                ref = torch.where(owned, ref, base)  # tiles we do not own keep the poison
            if not torch.equal(_bits(tri), _bits(ref)):
                bad = (tri != ref).nonzero()
                fails.append(f"call {call}: {len(bad)} elements differ from the rank-order sum, first at "
                             f"{tuple(bad[0].tolist()) if len(bad) else '?'}")
        results.append(tri)
    return fails, results


def _bits(t):
    return t.view(torch.int16 if t.element_size() == 2 else torch.int32)


@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("variant", REDUCTIONS)
def test_reductions(pools, world_size, variant):
    # bf16 where its rounding differs between schedules: one rounding at the end, or one per rank (spinlock)
    dtypes = [torch.float32] + ([torch.bfloat16] if world_size == 3 and variant in ("one_shot", "spinlock") else [])
    for dtype in dtypes:
        results = pools(world_size).run(_reduce_body, variant, dtype)
        fails = [f"{dtype} rank {r}: {f}" for r, (fs, _) in enumerate(results) for f in fs]
        assert not fails, "\n".join(fails)
        if variant not in ("atomic", "reduce_scatter"):  # every rank holds the whole result: the same bits
            for call in range(2):
                first = _bits(results[0][1][call])
                for r in range(1, world_size):
                    assert torch.equal(first, _bits(results[r][1][call])), f"{dtype} call {call + 1}: rank {r} differs"


def _config_body():
    ctx = new_context(1 << 25 if GPU_SCALE else 1 << 21)
    rank, world, dev = ctx.get_rank(), ctx.get_num_ranks(), ctx.get_device()
    inputs = [_data(r, (M, N), torch.float32, salt=5) for r in range(world)]
    staged = ctx.empty((M, N), dtype=torch.float32)
    staged.copy_(inputs[rank].to(dev))
    out = ctx.full((M, N), float(poison_value(torch.float32)))
    ctx.barrier()
    grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))
    _config_kernel[grid](staged, out, ctx.get_device_context(), M, N, N, 1, RANK=rank, WORLD_SIZE=world,
                         BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, VARIANT=1)
    ctx.barrier()
    return torch.equal(out.cpu(), _rank_order_sum(inputs))


def test_all_reduce_config(pools):
    assert pools(WORLD_SIZES[0]).run(_config_body) == [True] * WORLD_SIZES[0]


def _move_body(op):
    ctx = new_context(1 << 25 if GPU_SCALE else 1 << 21)
    rank, world, dev = ctx.get_rank(), ctx.get_num_ranks(), ctx.get_device()
    per_rank = 11 if op == "all_to_all" else 0  # columns per rank: not a multiple of the tile's 16
    shape = (M, world * per_rank) if op == "all_to_all" else (M, N)
    inputs = [_data(r, shape, torch.float16, salt=9) for r in range(world)]
    x = ctx.empty(shape, dtype=torch.float16)
    x.copy_(inputs[rank].to(dev))
    if op == "all_gather_0" or op == "gather":
        ref = ref_ops.all_gather(inputs, 0)
    elif op == "all_gather_1":
        ref = ref_ops.all_gather(inputs, 1)
    else:
        ref = ref_ops.all_to_all(inputs, rank)
    out = ctx.full(ref.shape, float(poison_value(torch.float16)), dtype=torch.float16)
    ctx.barrier()
    _move_kernel[(PROGRAMS,)](x, out, ctx.get_device_context(), shape[0], shape[1], shape[1], 1, ref.shape[0],
                              ref.shape[1], ref.shape[1], 1, per_rank, MOVES.index(op), RANK=rank, WORLD_SIZE=world,
                              BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N)
    ctx.barrier()
    tri = out.cpu()
    return None if torch.equal(_bits(tri), _bits(ref)) else f"{int((tri != ref).sum())} of {ref.numel()} differ"


@pytest.mark.parametrize("world_size", WORLD_SIZES)
@pytest.mark.parametrize("op", MOVES)
def test_data_movement(pools, world_size, op):
    results = pools(world_size).run(_move_body, op)
    fails = [f"rank {r}: {f}" for r, f in enumerate(results) if f]
    assert not fails, "\n".join(fails)


def test_config_rejects_unknown_variant():
    with pytest.raises(ValueError, match="AllReduceConfig: variant_code 7 is not one of 0..4"):
        iris.x.AllReduceConfig(7, None)


@triton.jit
def _gather_along_kernel(x, out, context, DIM: tl.constexpr, RANK: tl.constexpr, WORLD_SIZE: tl.constexpr):
    dctx = iris.DeviceContext.initialize(context, RANK, WORLD_SIZE)
    tile = iris.x.Tile(0, 0, 8, 16, tl.load(x + tl.arange(0, 8)[:, None] * 16 + tl.arange(0, 16)[None, :]))
    iris.x.all_gather(tile, iris.x.make_tensor_view(out, 8, 16 * WORLD_SIZE, 16 * WORLD_SIZE, 1), DIM, dctx)


def _bad_dim_body():
    ctx = new_context(1 << 20)
    x, out = ctx.ones(8, 16), ctx.zeros(8, 16 * ctx.get_num_ranks())
    return error_message(lambda: _gather_along_kernel[(1,)](x, out, ctx.get_device_context(), 2,
                                                            ctx.get_rank(), ctx.get_num_ranks()))


def test_all_gather_refuses_a_dim_past_1(pools):
    for message in pools(2).run(_bad_dim_body):
        assert "iris.x.all_gather: dim must be 0 (rows) or 1 (columns)" in message, message
