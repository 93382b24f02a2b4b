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
    after us); ``dim`` is 0 or 1, anything else refused at compile time. Elements past the local block (a tile at
    the edge of a block that is not a multiple of the tile) are masked, so they never spill into the next rank's
    block. Plain stores: a peer sees them after this kernel ends and a barrier (or after a lock the caller
    releases). In debug mode (``IRIS_DEBUG=1``) a tile outside a peer's heap stops the kernel (``translate``).

    Example::

        import iris.x

        @triton.jit
        def gather_rows(x, out, context, M, N, RANK: tl.constexpr, WORLD_SIZE: tl.constexpr, BLOCK_M: tl.constexpr,
                        BLOCK_N: tl.constexpr):
            dctx = iris.DeviceContext.initialize(context, RANK, WORLD_SIZE)
            pid_m, pid_n = tl.program_id(0), tl.program_id(1)
            ptrs, mask = iris.x.tile_ptr(x, M, N, N, 1, pid_m, pid_n, BLOCK_M, BLOCK_N)
            tile = iris.x.Tile(pid_m, pid_n, BLOCK_M, BLOCK_N, tl.load(ptrs, mask=mask, other=0))
            iris.x.all_gather(tile, iris.x.make_tensor_view(out, WORLD_SIZE * M, N, N, 1), 0, dctx)

        M, N = 6, 12  # each rank's block: less than one 8 x 16 tile
        inputs = [torch.arange(M * N, dtype=torch.float32).view(M, N) + 100 * r for r in range(world_size)]
        x, out = inputs[rank].to(ctx.get_device()), ctx.zeros(world_size * M, N)
        ctx.barrier()  # every rank's out is zeroed before a peer writes its block
        gather_rows[(1, 1)](x, out, ctx.get_device_context(), M, N, RANK=rank, WORLD_SIZE=world_size, BLOCK_M=8,
                            BLOCK_N=16)
        ctx.barrier()  # every rank's blocks have landed
        assert torch.equal(out.cpu(), torch.cat(inputs))
    """
    tl.static_assert((dim == 0) | (dim == 1), "iris.x.all_gather: dim must be 0 (rows) or 1 (columns)")
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
