"""Tile reduce_scatter: the ranks split the tiles into contiguous blocks, and the rank that owns a tile stores the
sum over ranks of it into its own ``dst_view``. Rank r owns tiles ``[r * T // W, (r + 1) * T // W)`` with
``T // W`` tiles each and the last rank taking the remainder (``T`` tiles, ``W`` ranks), upstream's split."""

import triton
import triton.language as tl

from iris.x.all_reduce import _sum_over_ranks
from iris.x.common import tile_id


@triton.jit
def owned_tiles(total_tiles, rank, world_size):
    """``[start, end)`` of the tiles ``rank`` owns."""
    per_rank = total_tiles // world_size
    start = rank * per_rank
    end = tl.where(rank == world_size - 1, total_tiles, start + per_rank)
    return start, end


@triton.jit
def reduce_scatter(tile, src_view, dst_view, locks, ctx, epoch=1):
    """If this rank owns the tile: ``dst_view``'s tile (ours) = sum over ranks of their ``src_view`` tile, ours from
    ``tile.data``, each peer's read once its ``locks[tile_id]`` has reached ``epoch`` (as in
    ``all_reduce_one_shot``). Summed in rank order 0..W-1 (fp32 for fp16/bf16). Tiles we do not own are left
    untouched; no other rank's memory is written."""
    tid = tile_id(tile, dst_view)
    start, end = owned_tiles(dst_view.number_of_tiles(tile.block_m, tile.block_n), ctx.rank, ctx.world_size)
    if (tid >= start) & (tid < end):
        src_ptr, mask = src_view.tile_ptr(tile)
        dst_ptr, dst_mask = dst_view.tile_ptr(tile)
        acc = _sum_over_ranks(tile.data, src_ptr, mask, locks + tid, epoch, ctx, True)
        tl.store(dst_ptr, acc.to(dst_view.ptr.dtype.element_ty), mask=dst_mask)
