"""Tile all_gather: our tile, computed in registers, stored into every rank's gathered output at our block.

``dst_view`` is the whole gathered tensor: ``(W * M_local, N)`` for ``dim=0``, ``(M, W * N_local)`` for ``dim=1``;
our tile ``(pid_m, pid_n)`` of the local ``M_local x N`` (or ``M x N_local``) result lands at row (column) offset
``rank * M_local`` (``rank * N_local``) on every rank.
"""

import triton
import triton.language as tl

from iris.device.rma import store


@triton.jit
def all_gather(tile, dst_view, dim: tl.constexpr, ctx):
    """``tile.data`` stored into every rank's ``dst_view`` at our block along ``dim`` (ours first, then the ranks
    after us). Elements past the local block (a tile at the edge of a block that is not a multiple of the tile)
    are masked, so they never spill into the next rank's block. Plain stores: a peer sees them after this kernel
    ends and a barrier (or after a lock the caller releases)."""
    rm, rn = tile.indices()
    if dim == 0:
        local = dst_view.M // ctx.world_size
        ptrs, mask = dst_view.offset_tile_ptr(tile, offset_m=ctx.rank * local, src_mask=(rm < local)[:, None])
    else:
        local = dst_view.N // ctx.world_size
        ptrs, mask = dst_view.offset_tile_ptr(tile, offset_n=ctx.rank * local, src_mask=(rn < local)[None, :])
    value = tile.data.to(dst_view.ptr.dtype.element_ty)
    for i in tl.static_range(ctx.world_size):
        store(ptrs, value, ctx.rank, (ctx.rank + i) % ctx.world_size, ctx.heap_bases, mask=mask)
