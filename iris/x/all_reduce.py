"""Tile all_reduce: the calling program's tile of ``dst_view`` ends as the sum over ranks of their tile.

Five schedules, upstream's, each called by a kernel on a tile it owns (the kernel walks the tiles):

    atomic     tile.data atomically added into every rank's dst tile             (float atomics: not deterministic)
    spinlock   tile.data added into every rank's dst tile under that tile's lock, ranks taking turns 0, 1, ..., W-1
    one_shot   every rank's tile read once its lock says it is ready, summed, stored into our dst
    two_shot   as one_shot on the tiles this rank owns (start_tile, stride), then stored into every rank's dst
    ring       every rank's src tile read (no locks: all src ready before the kernel), summed, stored into our dst

Every sum but atomic's adds the ranks' tiles in rank order 0..W-1 in fp32 for fp16/bf16 (``widen``), whichever
rank computes it, so every rank's dst holds the same bits. Reference (sum over ranks): ``iris/x/reference.py``.

Visibility: the loads of peers' tiles follow an acquire of their lock (one_shot, two_shot) or the kernel's start
(ring: the caller made every src ready before it, a host or device barrier); the stores into peers' dst (atomic,
spinlock, two_shot) are plain stores, visible to a peer after this kernel ends and a barrier.
"""

import triton
import triton.language as tl

from iris.device.atomics import atomic_add, atomic_xchg
from iris.device.debug import ENABLED as DEBUG
from iris.device.debug import check_wait
from iris.device.rma import load, store
from iris.x.common import tile_id, wait_for_peer, widen


@triton.jit
def _sum_over_ranks(ours, src_ptr, mask, lock, epoch, ctx, WAIT: tl.constexpr):
    """Sum over ranks 0..W-1 of their tile at ``src_ptr``, ours given as ``ours``, widened; with ``WAIT`` each peer's
    tile is read only once its ``lock`` (on the peer's heap) has reached ``epoch``."""
    for r in tl.static_range(ctx.world_size):
        if r == ctx.rank:
            part = widen(ours)
        else:
            if WAIT:
                wait_for_peer(lock, epoch, ctx.rank, r, ctx.heap_bases, "x.all_reduce")
            part = widen(load(src_ptr, ctx.rank, r, ctx.heap_bases, mask=mask, other=0))
        if r == 0:
            acc = part
        else:
            acc = acc + part
    return acc


@triton.jit
def all_reduce_atomic(tile, dst_view, ctx):
    """``tile.data`` added into ``dst_view``'s tile on every rank (ours first, then the ranks after us) with relaxed
    sys-scope atomics. Every rank's dst must hold zeros (or a base to add to) before any rank starts.

    **Not deterministic** for floats: the ranks' adds land in whatever order they arrive, so the sum's rounding,
    and with it the bits, can differ between runs and between ranks. Exact for integers. Visible to a peer once
    this kernel has ended and a barrier followed. In debug mode (``IRIS_DEBUG=1``) a tile outside a peer's heap stops
    the kernel (``translate``).

    Example::

        import iris.x

        @triton.jit
        def sum_tiles_atomic(x, out, context, M, N, RANK: tl.constexpr, WORLD_SIZE: tl.constexpr,
                             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
            dctx = iris.DeviceContext.initialize(context, RANK, WORLD_SIZE)
            ptrs, mask = iris.x.tile_ptr(x, M, N, N, 1, tl.program_id(0), 0, BLOCK_M, BLOCK_N)
            tile = iris.x.Tile(tl.program_id(0), 0, BLOCK_M, BLOCK_N, tl.load(ptrs, mask=mask))
            iris.x.all_reduce_atomic(tile, iris.x.make_tensor_view(out, M, N, N, 1), dctx)

        M, N = 8 * world_size, 16  # one 8 x 16 tile per rank
        inputs = [torch.arange(M * N, dtype=torch.float32).view(M, N) + 100 * r for r in range(world_size)]
        x, out = inputs[rank].to(ctx.get_device()), ctx.zeros(M, N)
        ctx.barrier()  # every rank's out is zeroed before a peer adds to it
        sum_tiles_atomic[(world_size,)](x, out, ctx.get_device_context(), M, N, RANK=rank, WORLD_SIZE=world_size,
                                        BLOCK_M=8, BLOCK_N=16)
        ctx.barrier()  # every rank's adds have landed
        assert torch.equal(out.cpu(), sum(inputs))  # exact here: small integers in fp32
    """
    dst_ptr, mask = dst_view.tile_ptr(tile)
    value = tile.data.to(dst_view.ptr.dtype.element_ty)
    for i in tl.static_range(ctx.world_size):
        dest = (ctx.rank + i) % ctx.world_size
        atomic_add(dst_ptr, value, ctx.rank, dest, ctx.heap_bases, mask=mask, sem="relaxed", scope="sys")


@triton.jit
def all_reduce_spinlock(tile, dst_view, locks, ctx):
    """``tile.data`` added into ``dst_view``'s tile on every rank under that tile's lock on that rank (``locks``:
    one int32 per tile on the heap, zeroed once; ``locks + tile_id`` guards the tile).

    Deterministic: the lock holds whose turn it is, and the ranks take it in order 0, 1, ..., W-1, so every rank's
    dst tile is ``((dst + x_0) + x_1) + ...``, the same bits everywhere. Each partial sum is stored in dst's dtype:
    fp16/bf16 round after every rank's add (the schedule keeps its sums in dst, which has no room for fp32).
    The last rank hands the lock back to 0, as upstream's spinlock leaves it free, so the same locks serve the next
    call: a rank cannot meet a stale turn of its own, since it passed its turn on before its next call could start.
    Turns are taken with a sys-scope acquire and passed on with a release after the tile's stores. In debug mode
    (``IRIS_DEBUG=1``) a tile or lock outside a peer's heap stops the kernel (``translate``), and so does a turn that
    has not come after ``IRIS_DEBUG_SPIN_LIMIT`` polls, naming the rank whose lock it waits on and the turn it saw.

    Example::

        import iris.x

        @triton.jit
        def sum_tiles_spinlock(x, out, locks, context, M, N, RANK: tl.constexpr, WORLD_SIZE: tl.constexpr,
                               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
            dctx = iris.DeviceContext.initialize(context, RANK, WORLD_SIZE)
            ptrs, mask = iris.x.tile_ptr(x, M, N, N, 1, tl.program_id(0), 0, BLOCK_M, BLOCK_N)
            tile = iris.x.Tile(tl.program_id(0), 0, BLOCK_M, BLOCK_N, tl.load(ptrs, mask=mask))
            iris.x.all_reduce_spinlock(tile, iris.x.make_tensor_view(out, M, N, N, 1), locks, dctx)

        M, N = 8 * world_size, 16  # one 8 x 16 tile per rank
        inputs = [torch.arange(M * N, dtype=torch.float32).view(M, N) + 100 * r for r in range(world_size)]
        x, out, locks = inputs[rank].to(ctx.get_device()), ctx.zeros(M, N), ctx.zeros(world_size, dtype=torch.int32)
        ctx.barrier()  # every rank's out and locks are zeroed before a peer takes a turn
        sum_tiles_spinlock[(world_size,)](x, out, locks, ctx.get_device_context(), M, N, RANK=rank,
                                          WORLD_SIZE=world_size, BLOCK_M=8, BLOCK_N=16)
        ctx.barrier()  # every rank's adds have landed
        assert torch.equal(out.cpu(), sum(inputs))  # ((0 + x_0) + x_1) + ...: rank order, on every rank
    """
    dst_ptr, mask = dst_view.tile_ptr(tile)
    lock = locks + tile_id(tile, dst_view)
    ours = widen(tile.data)
    for i in tl.static_range(ctx.world_size):
        dest = (ctx.rank + i) % ctx.world_size  # ours first: rank 0 never waits, so every turn comes
        turn = atomic_add(lock, 0, ctx.rank, dest, ctx.heap_bases, sem="acquire", scope="sys")
        spins = 0
        while turn != ctx.rank:
            if DEBUG:
                spins += 1
                check_wait(spins, ctx.rank, dest, turn, ctx.rank, "x.all_reduce_spinlock")
            turn = atomic_add(lock, 0, ctx.rank, dest, ctx.heap_bases, sem="acquire", scope="sys")
        current = load(dst_ptr, ctx.rank, dest, ctx.heap_bases, mask=mask, other=0)
        total = (widen(current) + ours).to(dst_view.ptr.dtype.element_ty)
        store(dst_ptr, total, ctx.rank, dest, ctx.heap_bases, mask=mask)
        atomic_xchg(lock, (ctx.rank + 1) % ctx.world_size, ctx.rank, dest, ctx.heap_bases, sem="release",
                    scope="sys")


@triton.jit
def all_reduce_one_shot(tile, src_view, dst_view, locks, ctx, epoch=1):
    """``dst_view``'s tile (ours only) = sum over ranks of their ``src_view`` tile, ours taken from ``tile.data``.

    ``locks`` (one int32 per tile on the heap) says when a peer's tile is ready: the peer stores its tile into its
    ``src_view`` and then raises ``locks[tile_id]`` with a sys-scope release (upstream's kernels set it to 1); we
    wait until the peer's lock has reached ``epoch`` (1 by default; a lock raised by one per call takes the call's
    number). Summed in rank order 0..W-1 (fp32 for fp16/bf16): the same bits on every rank. In debug mode
    (``IRIS_DEBUG=1``) a peer's tile or lock outside its heap stops the kernel (``translate``), and so does a lock
    that has not reached ``epoch`` after ``IRIS_DEBUG_SPIN_LIMIT`` polls.

    Example::

        import iris.x

        @triton.jit
        def sum_tiles_one_shot(x, staged, out, locks, context, M, N, RANK: tl.constexpr, WORLD_SIZE: tl.constexpr,
                               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
            dctx = iris.DeviceContext.initialize(context, RANK, WORLD_SIZE)
            src_view, dst_view = iris.x.make_tensor_view(staged, M, N, N, 1), iris.x.make_tensor_view(out, M, N, N, 1)
            pid_m = tl.program_id(0)
            ptrs, mask = iris.x.tile_ptr(x, M, N, N, 1, pid_m, 0, BLOCK_M, BLOCK_N)
            tile = iris.x.Tile(pid_m, 0, BLOCK_M, BLOCK_N, tl.load(ptrs, mask=mask))  # [BLOCK_M, BLOCK_N]
            # ---- publish: our tile where peers read it, then its lock (a release: after the tile)
            staged_ptrs, _ = src_view.tile_ptr(tile)
            tl.store(staged_ptrs, tile.data, mask=mask)
            dctx.atomic_xchg(locks + pid_m, 1, RANK, sem="release", scope="sys")
            iris.x.all_reduce_one_shot(tile, src_view, dst_view, locks, dctx)

        M, N = 8 * world_size, 16  # one 8 x 16 tile per rank
        inputs = [torch.arange(M * N, dtype=torch.float32).view(M, N) + 100 * r for r in range(world_size)]
        x, staged, out = inputs[rank].to(ctx.get_device()), ctx.empty(M, N), ctx.zeros(M, N)
        locks = ctx.zeros(world_size, dtype=torch.int32)  # one per tile
        ctx.barrier()  # every rank's locks are zeroed before a peer reads them
        sum_tiles_one_shot[(world_size,)](x, staged, out, locks, ctx.get_device_context(), M, N, RANK=rank,
                                          WORLD_SIZE=world_size, BLOCK_M=8, BLOCK_N=16)
        assert torch.equal(out.cpu(), sum(inputs))  # our out only: no barrier needed before reading it
    """
    src_ptr, mask = src_view.tile_ptr(tile)
    dst_ptr, dst_mask = dst_view.tile_ptr(tile)
    acc = _sum_over_ranks(tile.data, src_ptr, mask, locks + tile_id(tile, dst_view), epoch, ctx, True)
    tl.store(dst_ptr, acc.to(dst_view.ptr.dtype.element_ty), mask=dst_mask)


@triton.jit
def all_reduce_two_shot(tile, src_view, dst_view, locks, start_tile, stride, ctx, epoch=1):
    """One-shot's sum, computed only by the rank that owns the tile (tile ids ``start_tile, start_tile + stride,
    ...``; ranks pass ``rank, world_size`` to interleave), which stores it into every rank's ``dst_view`` (ours,
    then the ranks after us). A tile this rank does not own is left to its owner. Locks and ``epoch`` as in
    ``all_reduce_one_shot``. The same bits on every rank (one rank computes each tile, in rank order).
    In debug mode (``IRIS_DEBUG=1``) a peer's tile or lock outside its heap stops the kernel
    (``translate``), and so does a lock that has not reached ``epoch`` after ``IRIS_DEBUG_SPIN_LIMIT`` polls.

    Example::

        import iris.x

        @triton.jit
        def sum_tiles_two_shot(x, staged, out, locks, context, M, N, RANK: tl.constexpr, WORLD_SIZE: tl.constexpr,
                               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
            dctx = iris.DeviceContext.initialize(context, RANK, WORLD_SIZE)
            src_view, dst_view = iris.x.make_tensor_view(staged, M, N, N, 1), iris.x.make_tensor_view(out, M, N, N, 1)
            pid_m = tl.program_id(0)
            ptrs, mask = iris.x.tile_ptr(x, M, N, N, 1, pid_m, 0, BLOCK_M, BLOCK_N)
            tile = iris.x.Tile(pid_m, 0, BLOCK_M, BLOCK_N, tl.load(ptrs, mask=mask))  # [BLOCK_M, BLOCK_N]
            # ---- publish: our tile where peers read it, then its lock (a release: after the tile)
            staged_ptrs, _ = src_view.tile_ptr(tile)
            tl.store(staged_ptrs, tile.data, mask=mask)
            dctx.atomic_xchg(locks + pid_m, 1, RANK, sem="release", scope="sys")
            # tile t's owner is rank t % WORLD_SIZE: it sums the tile and stores it into every rank's out
            iris.x.all_reduce_two_shot(tile, src_view, dst_view, locks, RANK, WORLD_SIZE, dctx)

        M, N = 8 * world_size, 16  # one 8 x 16 tile per rank
        inputs = [torch.arange(M * N, dtype=torch.float32).view(M, N) + 100 * r for r in range(world_size)]
        x, staged, out = inputs[rank].to(ctx.get_device()), ctx.empty(M, N), ctx.zeros(M, N)
        locks = ctx.zeros(world_size, dtype=torch.int32)  # one per tile
        ctx.barrier()  # every rank's locks are zeroed before a peer reads them
        sum_tiles_two_shot[(world_size,)](x, staged, out, locks, ctx.get_device_context(), M, N, RANK=rank,
                                          WORLD_SIZE=world_size, BLOCK_M=8, BLOCK_N=16)
        ctx.barrier()  # the owners' stores into our out have landed
        assert torch.equal(out.cpu(), sum(inputs))
    """
    tid = tile_id(tile, dst_view)
    if (tid >= start_tile) & ((tid - start_tile) % stride == 0):
        src_ptr, mask = src_view.tile_ptr(tile)
        dst_ptr, dst_mask = dst_view.tile_ptr(tile)
        acc = _sum_over_ranks(tile.data, src_ptr, mask, locks + tid, epoch, ctx, True)
        result = acc.to(dst_view.ptr.dtype.element_ty)
        for i in tl.static_range(ctx.world_size):
            store(dst_ptr, result, ctx.rank, (ctx.rank + i) % ctx.world_size, ctx.heap_bases, mask=dst_mask)


@triton.jit
def all_reduce_ring(tile, src_view, dst_view, ctx):
    """``dst_view``'s tile (ours) = sum over ranks of their ``src_view`` tile, read from their heaps; no locks, so
    every rank's src must be ready before the kernel starts (a barrier). ``tile`` needs no data.

    The sum runs in rank order 0..W-1 (fp32 for fp16/bf16) whichever rank computes it, so every rank gets the same
    bits (upstream's ring adds in ring order, rank - 1, rank - 2, ..., which gives each rank other bits). Each rank
    writes only its own dst and never reads a peer's: nothing orders a peer's dst writes before our reads. In debug
    mode (``IRIS_DEBUG=1``) a tile outside a peer's heap stops the kernel (``translate``).

    Example::

        import iris.x

        @triton.jit
        def sum_tiles_ring(x, out, context, M, N, RANK: tl.constexpr, WORLD_SIZE: tl.constexpr,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
            dctx = iris.DeviceContext.initialize(context, RANK, WORLD_SIZE)
            tile = iris.x.TileView(tl.program_id(0), 0, BLOCK_M, BLOCK_N)  # no data: every rank's x is read
            src_view, dst_view = iris.x.make_tensor_view(x, M, N, N, 1), iris.x.make_tensor_view(out, M, N, N, 1)
            iris.x.all_reduce_ring(tile, src_view, dst_view, dctx)

        M, N = 8 * world_size, 16  # one 8 x 16 tile per rank
        inputs = [torch.arange(M * N, dtype=torch.float32).view(M, N) + 100 * r for r in range(world_size)]
        x, out = ctx.empty(M, N).copy_(inputs[rank]), ctx.zeros(M, N)  # x on the heap: peers read it
        ctx.barrier()  # every rank's x is written before a peer reads it
        sum_tiles_ring[(world_size,)](x, out, ctx.get_device_context(), M, N, RANK=rank, WORLD_SIZE=world_size,
                                      BLOCK_M=8, BLOCK_N=16)
        assert torch.equal(out.cpu(), sum(inputs))
    """
    src_ptr, mask = src_view.tile_ptr(tile)
    dst_ptr, dst_mask = dst_view.tile_ptr(tile)
    ours = tl.load(src_ptr, mask=mask, other=0)
    acc = _sum_over_ranks(ours, src_ptr, mask, src_ptr, 0, ctx, False)
    tl.store(dst_ptr, acc.to(dst_view.ptr.dtype.element_ty), mask=dst_mask)


@triton.jit
def all_reduce(tile, src_view, dst_view, config, ctx, epoch=1):
    """The all_reduce ``config.variant_code`` names (``AllReduceConfig``), with ``config.locks_ptr`` as its locks;
    two_shot splits the tiles as ``rank, world_size``. ``AllReduceConfig`` raises ``ValueError`` for a
    ``variant_code`` outside 0..4; debug mode checks what the variant's own function checks.

    Example::

        import iris.x

        @triton.jit
        def sum_tiles_by_config(x, staged, out, locks, context, M, N, RANK: tl.constexpr, WORLD_SIZE: tl.constexpr,
                                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, VARIANT: tl.constexpr):
            dctx = iris.DeviceContext.initialize(context, RANK, WORLD_SIZE)
            src_view, dst_view = iris.x.make_tensor_view(staged, M, N, N, 1), iris.x.make_tensor_view(out, M, N, N, 1)
            pid_m = tl.program_id(0)
            ptrs, mask = iris.x.tile_ptr(x, M, N, N, 1, pid_m, 0, BLOCK_M, BLOCK_N)
            tile = iris.x.Tile(pid_m, 0, BLOCK_M, BLOCK_N, tl.load(ptrs, mask=mask))  # [BLOCK_M, BLOCK_N]
            # ---- publish: our tile where peers read it, then its lock (a release: after the tile)
            staged_ptrs, _ = src_view.tile_ptr(tile)
            tl.store(staged_ptrs, tile.data, mask=mask)
            dctx.atomic_xchg(locks + pid_m, 1, RANK, sem="release", scope="sys")
            iris.x.all_reduce(tile, src_view, dst_view, iris.x.AllReduceConfig(VARIANT, locks), dctx)

        M, N = 8 * world_size, 16  # one 8 x 16 tile per rank
        inputs = [torch.arange(M * N, dtype=torch.float32).view(M, N) + 100 * r for r in range(world_size)]
        x, staged, out = inputs[rank].to(ctx.get_device()), ctx.empty(M, N), ctx.zeros(M, N)
        locks = ctx.zeros(world_size, dtype=torch.int32)  # one per tile
        ctx.barrier()  # every rank's locks are zeroed before a peer reads them
        sum_tiles_by_config[(world_size,)](x, staged, out, locks, ctx.get_device_context(), M, N, RANK=rank,
                                           WORLD_SIZE=world_size, BLOCK_M=8, BLOCK_N=16, VARIANT=2)  # 2: one_shot
        assert torch.equal(out.cpu(), sum(inputs))
    """
    if config.variant_code == 0:
        all_reduce_atomic(tile, dst_view, ctx)
    elif config.variant_code == 1:
        all_reduce_ring(tile, src_view, dst_view, ctx)
    elif config.variant_code == 2:
        all_reduce_one_shot(tile, src_view, dst_view, config.locks_ptr, ctx, epoch)
    elif config.variant_code == 3:
        all_reduce_two_shot(tile, src_view, dst_view, config.locks_ptr, ctx.rank, ctx.world_size, ctx, epoch)
    else:
        all_reduce_spinlock(tile, dst_view, config.locks_ptr, ctx)
