"""Tile gather: one rank's tile, returned in registers for the caller to consume (a GEMM's K loop), not stored."""

import triton
import triton.language as tl  # noqa: F401  (the interpreter looks for it in every jitted module)

from iris.device.rma import load


@triton.jit
def gather(tile, src_view, source_rank, ctx):
    """``src_view``'s tile on ``source_rank`` (any rank, ours included; a value or a constexpr), masked elements 0.
    A plain load: the caller makes the source tile ready first (a barrier, or a lock it acquires). In debug mode
    (``IRIS_DEBUG=1``) a ``source_rank`` outside ``[0, world_size)`` or a tile outside its heap stops the kernel
    (``translate``).

    Example::

        import iris.x

        @triton.jit
        def gather_peer_tile(x, out, context, M, N, RANK: tl.constexpr, WORLD_SIZE: tl.constexpr,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
            dctx = iris.DeviceContext.initialize(context, RANK, WORLD_SIZE)
            tile = iris.x.TileView(tl.program_id(0), tl.program_id(1), BLOCK_M, BLOCK_N)
            values = iris.x.gather(tile, iris.x.make_tensor_view(x, M, N, N, 1), (RANK + 1) % WORLD_SIZE, dctx)
            ptrs, mask = iris.x.make_tensor_view(out, M, N, N, 1).tile_ptr(tile)
            tl.store(ptrs, values, mask=mask)

        M, N = 6, 12
        inputs = [torch.arange(M * N, dtype=torch.float32).view(M, N) + 100 * r for r in range(world_size)]
        x, out = ctx.empty(M, N).copy_(inputs[rank]), ctx.zeros(M, N)
        ctx.barrier()  # every rank's x is written before a peer reads it
        gather_peer_tile[(1, 1)](x, out, ctx.get_device_context(), M, N, RANK=rank, WORLD_SIZE=world_size, BLOCK_M=8,
                                 BLOCK_N=16)
        assert torch.equal(out.cpu(), inputs[(rank + 1) % world_size])
    """
    src_ptr, mask = src_view.tile_ptr(tile)
    return load(src_ptr, ctx.rank, source_rank, ctx.heap_bases, mask=mask, other=0)
