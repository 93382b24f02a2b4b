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
    the peers: every rank's input must be ready before the kernel starts (a barrier). ``tile`` needs no data. In debug
    mode (``IRIS_DEBUG=1``) a tile outside a peer's heap stops the kernel (``translate``).

    Example::

        import iris.x

        @triton.jit
        def exchange_column_blocks(x, out, context, M, N, per_rank, RANK: tl.constexpr, WORLD_SIZE: tl.constexpr,
                                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
            dctx = iris.DeviceContext.initialize(context, RANK, WORLD_SIZE)
            tile = iris.x.TileView(tl.program_id(0), tl.program_id(1), BLOCK_M, BLOCK_N)  # no data: pulled
            src_view, dst_view = iris.x.make_tensor_view(x, M, N, N, 1), iris.x.make_tensor_view(out, M, N, N, 1)
            iris.x.all_to_all(tile, src_view, dst_view, per_rank, dctx)

        M, per_rank = 4, 3
        N = world_size * per_rank
        block = torch.arange(N) // per_rank  # [N]: the column block of each column
        x, out = ctx.zeros(M, N), ctx.zeros(M, N)
        x.copy_((10 * rank + block).float().expand(M, N))  # column block d of rank s holds 10 * s + d
        ctx.barrier()  # every rank's x is written before a peer reads it
        exchange_column_blocks[(1, 1)](x, out, ctx.get_device_context(), M, N, per_rank, RANK=rank,
                                       WORLD_SIZE=world_size, BLOCK_M=4, BLOCK_N=triton.next_power_of_2(N))
        assert torch.equal(out.cpu(), (10 * block + rank).float().expand(M, N))  # block s: rank s's block rank
    """
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
