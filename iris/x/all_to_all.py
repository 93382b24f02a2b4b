"""Tile all_to_all, split along dim 1 (upstream's meaning): every rank's input and output are ``(M, W * N_per_rank)``;
column block ``d`` of rank s's input becomes column block ``s`` of rank d's output.

A tile of the output, ``(pid_m, pid_n)``, is pulled: its columns that fall in block s are read from rank s's input
at block ``rank``. A tile that straddles two blocks (``N_per_rank`` not a multiple of the tile) reads each part
from its own rank.
"""

import triton
import triton.language as tl

from iris.device.rma import load


@triton.jit
def all_to_all(tile, src_view, dst_view, N_per_rank, ctx):
    """``dst_view``'s tile (ours) = the matching columns of every rank's ``src_view``, as above. Plain loads from
    the peers: every rank's input must be ready before the kernel starts (a barrier). ``tile`` needs no data."""
    rm, rn = tile.indices()  # rn: output columns of this tile
    first_col = tile.pid_n * tile.block_n
    last_src = tl.minimum((first_col + tile.block_n - 1) // N_per_rank, ctx.world_size - 1)
    dst_ptr, dst_mask = dst_view.tile_ptr(tile)
    for s in range(first_col // N_per_rank, last_src + 1):
        in_block = (rn >= s * N_per_rank) & (rn < (s + 1) * N_per_rank)  # [BLOCK_N]
        src_cols = rn - s * N_per_rank + ctx.rank * N_per_rank  # where rank s keeps our block
        src_ptr, src_mask = src_view.tile_ptr_from_indices(rm, src_cols, tile.block_m, tile.block_n)
        mask = dst_mask & src_mask & in_block[None, :]
        values = load(src_ptr, ctx.rank, s, ctx.heap_bases, mask=mask, other=0)
        tl.store(dst_ptr, values.to(dst_view.ptr.dtype.element_ty), mask=mask)
