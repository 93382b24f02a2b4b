"""reduce_scatter into a full-size output (upstream Iris's layout): rank r's ``out`` [M, N] receives the reduction
at its own tiles only; every other element of its ``out`` is left as it was.

The tiles are upstream's: ``block_m x block_n`` tiles of [M, N] numbered in grouped order (``group_m`` tile rows
per group, column-major inside a group), handed to the ranks either in blocks (``distribution=1``: rank r owns
tiles ``[r * T, (r + 1) * T)`` with ``T = cdiv(tiles, W)``) or by striding (``distribution=0``: tiles r, r + W,
...). Without a config: 32 x 64 tiles, groups of 4 tile rows, blocks, as upstream's default; an
``iris.ccl.Config`` sets ``block_size_m``, ``block_size_n``, ``swizzle_size`` and ``all_reduce_distribution``.

Pull: barrier (inputs ready)  ->  for each of our tiles: out[tile] = op over members 0..W-1 of inp[tile]
      ->  barrier (no rank still reads our input)
"""

from dataclasses import dataclass

import triton
import triton.language as tl

from iris.ccl import common
from iris.device.group import combine, finish, program_row
from iris.device.rma import load
from iris.device.sync import call_match, group_barrier, open_call


@dataclass(frozen=True)
class TileLayout:
    """Which tiles of an [M, N] output each rank keeps (upstream's reduce_scatter tile map)."""

    block_m: int = 32
    block_n: int = 64
    group_m: int = 4
    distribution: int = 1  # 1: a block of consecutive tiles per rank; 0: every W-th tile

    def owned(self, M, N, index, size):
        """(first tile, count, stride) of rank ``index``'s tiles in the grouped order."""
        tiles = triton.cdiv(M, self.block_m) * triton.cdiv(N, self.block_n)
        if self.distribution == 0:
            return index, triton.cdiv(max(tiles - index, 0), size), size
        per_rank = triton.cdiv(tiles, size)
        return index * per_rank, max(0, min(per_rank, tiles - index * per_rank)), 1

    def tile_rows_cols(self, tile_id, M, N):
        """(pid_m, pid_n) of ``tile_id`` in the grouped order: the host's copy of ``_tile_coords``."""
        num_pid_m, num_pid_n = triton.cdiv(M, self.block_m), triton.cdiv(N, self.block_n)
        per_group = self.group_m * num_pid_n
        first_m = tile_id // per_group * self.group_m
        rows = min(num_pid_m - first_m, self.group_m)
        return first_m + (tile_id % per_group) % rows, (tile_id % per_group) // rows


@triton.jit
def _tile_coords(tile_id, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    per_group = GROUP_M * num_pid_n
    first_m = tile_id // per_group * GROUP_M
    rows = tl.minimum(num_pid_m - first_m, GROUP_M)
    return first_m + (tile_id % per_group) % rows, (tile_id % per_group) // rows


@triton.jit
def _reduce_scatter_tiles_kernel(out, inp, M, N, stride_out, stride_in, owned, sync, GROUP_SIZE: tl.constexpr,
                                 OP: tl.constexpr, ACC_FP32: tl.constexpr, BLOCK_M: tl.constexpr,
                                 BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    flags, heap_bases, members, rank, group_index, world_size, fingerprint, tables, alarm = sync  # GroupSync.args
    match = call_match(sync, ((inp, tables[0]),))  # peers read inp (iris/device/sync.py)
    first, count, step = owned
    row = program_row(flags, world_size)
    # every rank's input is ready
    if open_call(row, heap_bases, members, rank, GROUP_SIZE, match, RELAXED=True)[1]:
        for t in range(tl.program_id(0), count, tl.num_programs(0)):
            pid_m, pid_n = _tile_coords(first + t * step, M, N, BLOCK_M, BLOCK_N, GROUP_M)
            rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
            rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
            mask = (rm[:, None] < M) & (rn[None, :] < N)
            rows64 = rm[:, None].to(tl.int64)  # row offsets pass 2**31 elements on large outputs
            src = inp + rows64 * stride_in + rn[None, :]
            # members in order 0..W-1 on every rank: the same bits wherever a tile is reduced
            acc = load(src, rank, tl.load(members), tables[0], mask=mask)  # [BLOCK_M, BLOCK_N]
            if ACC_FP32:
                acc = acc.to(tl.float32)
            for i in tl.static_range(1, GROUP_SIZE):
                acc = combine(acc, load(src, rank, tl.load(members + i), tables[0], mask=mask).to(acc.dtype), OP)
            acc = finish(acc, OP, GROUP_SIZE)
            tl.store(out + rows64 * stride_out + rn[None, :], acc.to(out.dtype.element_ty), mask=mask)
        # inputs free
        group_barrier(row, heap_bases, members, rank, GROUP_SIZE, RELAXED=True, KERNEL_END=True, call=match)


def layout_of(config):
    """The tile layout a config asks for: upstream's ``iris.ccl.Config`` carries one; otherwise upstream's
    reduce_scatter default."""
    if config is not None and hasattr(config, "swizzle_size"):
        return TileLayout(config.block_size_m, config.block_size_n, config.swizzle_size,
                          config.all_reduce_distribution)
    return TileLayout()


def reduce_scatter_tiles(ctx, out, inp, op, group, async_op, config, caller):
    """The full-size form of ``ccl.reduce_scatter`` (see the module docstring)."""
    op = common.reduce_op(op, inp.dtype, caller)
    config, layout = common.resolve_config(config, caller), layout_of(config)  # resolving checks upstream's fields
    M = inp.shape[0] if inp.dim() else 1
    N = inp.numel() // max(M, 1)
    for name, t in (("out", out), ("inp", inp)):
        common.flat(t, caller, name)
    common.in_place(caller, out, inp)
    ins = ctx.symmetric_table(inp, caller, "inp")
    p = common.plan(ctx, caller, inp.numel(), group, config)
    first, count, step = layout.owned(M, N, p.sync.index, p.sync.size)
    # the same grid on every rank (program p meets program p of every member): sized by the most tiles a rank owns
    most = layout.owned(M, N, 0, p.sync.size)[1]
    programs = max(1, min(p.programs, most))
    if M * N:
        fp = common.fingerprint(ctx, caller, (out, inp), op, layout, launch=dict(programs=programs), sync=p.sync)
        _reduce_scatter_tiles_kernel[(programs,)](
            out, inp, M, N, N, N, (first, count, step), p.sync.args(ctx, fp, (ins, ins)),
            GROUP_SIZE=p.sync.size, OP=op,
            ACC_FP32=common.accumulate_in_fp32(inp.dtype), BLOCK_M=layout.block_m, BLOCK_N=layout.block_n,
            GROUP_M=layout.group_m, num_warps=4)
    return common.done(ctx, async_op)
