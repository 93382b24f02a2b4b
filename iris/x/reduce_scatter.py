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
    untouched; no other rank's memory is written. In debug mode (``IRIS_DEBUG=1``) a peer's tile or lock outside its
    heap stops the kernel (``translate``), and so does a lock that has not reached ``epoch`` after
    ``IRIS_DEBUG_SPIN_LIMIT`` polls.

    Example::

        import iris.x

        @triton.jit
        def sum_my_tiles(x, staged, out, locks, context, M, N, RANK: tl.constexpr, WORLD_SIZE: tl.constexpr,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
            dctx = iris.DeviceContext.initialize(context, RANK, WORLD_SIZE)
            src_view, dst_view = iris.x.make_tensor_view(staged, M, N, N, 1), iris.x.make_tensor_view(out, M, N, N, 1)
            pid_m = tl.program_id(0)
            ptrs, mask = iris.x.tile_ptr(x, M, N, N, 1, pid_m, 0, BLOCK_M, BLOCK_N)
            tile = iris.x.Tile(pid_m, 0, BLOCK_M, BLOCK_N, tl.load(ptrs, mask=mask))  # [BLOCK_M, BLOCK_N]
            # ---- publish: our tile where its owner reads it, then its lock (a release: after the tile)
            staged_ptrs, _ = src_view.tile_ptr(tile)
            tl.store(staged_ptrs, tile.data, mask=mask)
            dctx.atomic_xchg(locks + pid_m, 1, RANK, sem="release", scope="sys")
            iris.x.reduce_scatter(tile, src_view, dst_view, locks, dctx)

        M, N = 8 * world_size, 16  # one 8 x 16 tile per rank: rank r owns tile r, rows 8 * r ...
        inputs = [torch.arange(M * N, dtype=torch.float32).view(M, N) + 100 * r for r in range(world_size)]
        x, staged, out = inputs[rank].to(ctx.get_device()), ctx.empty(M, N), ctx.zeros(M, N)
        locks = ctx.zeros(world_size, dtype=torch.int32)  # one per tile
        ctx.barrier()  # every rank's locks are zeroed before a peer reads them
        sum_my_tiles[(world_size,)](x, staged, out, locks, ctx.get_device_context(), M, N, RANK=rank,
                                    WORLD_SIZE=world_size, BLOCK_M=8, BLOCK_N=16)
        ref = torch.zeros(M, N)
        ref[8 * rank:8 * (rank + 1)] = sum(inputs)[8 * rank:8 * (rank + 1)]  # our tile; the others untouched
        assert torch.equal(out.cpu(), ref)
    """
    tid = tile_id(tile, dst_view)
    start, end = owned_tiles(dst_view.number_of_tiles(tile.block_m, tile.block_n), ctx.rank, ctx.world_size)
    if (tid >= start) & (tid < end):
        src_ptr, mask = src_view.tile_ptr(tile)
        dst_ptr, dst_mask = dst_view.tile_ptr(tile)
        acc = _sum_over_ranks(tile.data, src_ptr, mask, locks + tid, epoch, ctx, True)
        tl.store(dst_ptr, acc.to(dst_view.ptr.dtype.element_ty), mask=dst_mask)
