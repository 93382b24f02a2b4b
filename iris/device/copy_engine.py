"""Upstream Iris's device-side copy-engine operations, on NVIDIA's SMs.

A kernel on NVIDIA cannot drive a copy engine (there is no user-mode queue or doorbell a kernel can write: the
driver feeds the engines). These functions keep upstream's signatures and meaning with SM instructions, which for
the tile sizes a kernel hands over one call at a time is also the fast path (one copy-engine transfer costs ~5 us
to issue however small; SM stores to a peer reach ~370 GB/s on 2 x H200):

- the copy is ordinary loads and stores by the calling program: complete, for this program, when the call
  returns (stronger than upstream's "queued");
- a copy-engine atomic is an SM atomic with release/sys ordering, so it stays behind the program's earlier puts as
  SDMA's queue order keeps it;
- ``quiet`` only synchronises the program: there is no queue to drain;
- ``wait_then_put_*`` blocks the calling program on the flag (acquire/sys), where upstream queues the wait on the
  engine. A kernel whose poster program waits for producers of the same grid needs them resident (a persistent
  grid), or it deadlocks.

Transfers a kernel releases to the real copy engines are armed on the host first and gated on a flag the kernel
publishes (``iris.triggered``).
"""

import triton
import triton.language as tl

from iris.device.rma import put
from iris.device.sync import wait_until
from iris.device.translate import INTERPRETED, translate

ROW_BYTES = tl.constexpr(1024)  # bytes a program moves per step of a rectangle row: 8 per thread at 4 warps


@triton.jit(do_not_specialize=["value"])
def _signal_add_kernel(flag, value):
    # The host queue's signal: one release/sys add, after the stream's copies (the stream orders the kernel).
    # ``value`` is never specialised (1 would be a constant), so one compiled kernel per flag dtype serves every
    # value: the host launches it through the compiled handle (iris/host/copy_engine/api.py, _SignalLauncher).
    tl.atomic_add(flag, tl.cast(value, flag.dtype.element_ty), sem="release", scope="sys")


@triton.jit
def _release_add(flag_ptr, value, from_rank, to_rank, heap_bases):
    remote = translate(flag_ptr, from_rank, to_rank, heap_bases, None, None, "copy_engine signal")
    tl.debug_barrier()  # every warp's stores before the one thread's release (atomics.py says why)
    tl.atomic_add(remote, tl.cast(value, flag_ptr.dtype.element_ty), sem="release", scope="sys")


@triton.jit
def _copy_rect(from_ptr, to_ptr, from_rank, to_rank, heap_bases, width_bytes: tl.constexpr, height: tl.constexpr,
               src_pitch: tl.constexpr, dst_pitch: tl.constexpr):
    src = tl.cast(from_ptr, tl.pointer_type(tl.uint8))
    dst = translate(tl.cast(to_ptr, tl.pointer_type(tl.uint8)), from_rank, to_rank, heap_bases, None, None,
                    "copy_engine rect")
    cols = tl.arange(0, ROW_BYTES)
    for row in range(height):
        for start in range(0, width_bytes, ROW_BYTES):
            mask = start + cols < width_bytes
            values = tl.load(src + row * src_pitch + start + cols, mask=mask)
            tl.store(dst + row * dst_pitch + start + cols, values, mask=mask)


@triton.jit
def _word(copy_engine_ctx, index: tl.constexpr):
    return tl.load(copy_engine_ctx + index).to(tl.int64)


@triton.jit
def put_async(from_ptr, to_ptr, nbytes, from_rank, to_rank, heap_bases, copy_engine_ctx, signal_ptr=None,
              signal_value=1):
    """Hand ``nbytes`` from ``from_ptr`` (ours) to ``to_ptr`` on ``to_rank`` to a real copy engine, through the host
    proxy (``iris/host/copy_engine/proxy.py``), then add ``signal_value`` to ``signal_ptr`` on ``to_rank`` (an int32 or
    int64 flag; none if None). Returns at once: the program's stores before the call are what the engine copies
    (release, sys); ``quiet`` waits for completion. Costs tens of microseconds of latency and no SM time: for large
    regions; blocks of a tile or two are faster with ``iris.put``."""
    ring = tl.cast(_word(copy_engine_ctx, 0), tl.pointer_type(tl.int64))
    slots = _word(copy_engine_ctx, 1)
    head = tl.cast(_word(copy_engine_ctx, 2), tl.pointer_type(tl.int32))
    consumed = tl.cast(_word(copy_engine_ctx, 3), tl.pointer_type(tl.int64))
    ticket = tl.atomic_add(head, 1, sem="relaxed", scope="sys").to(tl.int64)
    while ticket - tl.load(consumed, volatile=True) >= slots:  # the ring is full: the proxy is SLOTS behind
        pass
    slot = ring + (ticket % slots) * 8
    dst = translate(to_ptr, from_rank, to_rank, heap_bases, None, None, "put_async")
    tl.store(slot + 1, tl.cast(from_ptr, tl.int64))
    tl.store(slot + 2, tl.cast(dst, tl.int64))
    tl.store(slot + 3, tl.cast(nbytes, tl.int64))
    if signal_ptr is None:
        tl.store(slot + 4, 0)
    else:
        remote = translate(signal_ptr, from_rank, to_rank, heap_bases, None, None, "put_async signal")
        tl.store(slot + 4, tl.cast(remote, tl.int64))
        tl.store(slot + 5, tl.cast(signal_value, tl.int64))
        tl.store(slot + 6, signal_ptr.dtype.element_ty.primitive_bitwidth)
    tl.debug_barrier()  # the program's stores, the data's included, before the publishing release (atomics.py)
    _publish(slot, ticket + 1)


@triton.jit
def _publish(slot, seq):
    # A release store, not an atomic: the ring is host memory, and GPU atomics on host memory need PCIe atomics.
    if INTERPRETED:
        tl.atomic_xchg(slot, seq, sem="release", scope="sys")
    else:
        tl.inline_asm_elementwise("st.release.sys.global.b64 [$1], $2;\n\tmov.u32 $0, 0;", "=r,l,l", [slot, seq],
                                  dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def quiet(copy_engine_ctx, to_rank):
    """Upstream: wait until this rank's copy-engine queue to ``to_rank`` has drained. Here: until every transfer
    posted with ``put_async`` (to any rank) has landed with its signal (acquire, sys). Puts by ``iris.put`` were the
    program's own stores, already issued; the call synchronises the program so that what follows sees them all.

    Example::

        # not run by the tests: quiet reads the copy-engine context, which needs a context made with engines=("sdma",)
        import iris.copy_engine

        @triton.jit
        def put_async_then_quiet(src, dst, flag, nbytes, rank, peer, heap_bases, copy_engine_ctx):
            iris.copy_engine.put_async(src, dst, nbytes, rank, peer, heap_bases, copy_engine_ctx, flag, 1)
            iris.quiet(copy_engine_ctx, peer)  # the transfer and its signal have landed

        src, dst, flag = ctx.full((1024,), float(rank)), ctx.zeros(1024), ctx.zeros(1, dtype=torch.int32)
        ctx.barrier()  # every rank's dst and flag are zeroed before a peer writes them
        peer = (rank + 1) % world_size
        put_async_then_quiet[(1,)](src, dst, flag, src.numel() * src.element_size(), rank, peer,
                                   ctx.get_heap_bases(), ctx.get_copy_engine_ctx())
        ctx.barrier()  # the peers' transfers have landed too
        assert torch.all(dst == (rank - 1) % world_size) and flag.item() == 1
    """
    head = tl.cast(_word(copy_engine_ctx, 2), tl.pointer_type(tl.int32))
    posted = tl.atomic_add(head, 0, sem="relaxed", scope="sys")
    while tl.atomic_add(head + 1, 0, sem="acquire", scope="sys") - posted < 0:  # wrap-safe int32
        pass
    tl.debug_barrier()


@triton.jit
def put_signal(from_ptr, to_ptr, from_rank, to_rank, heap_bases, copy_engine_ctx, flag_ptr, flag_value, mask=None,
               hint: tl.constexpr = None):
    """``put`` then ``*flag_ptr += flag_value`` on ``to_rank`` (release/sys): a peer that acquires the flag sees the
    data. ``copy_engine_ctx`` is not read (``ctx.get_copy_engine_ctx()``, None without copy engines, will do). In debug
    mode (``IRIS_DEBUG=1``) a rank outside ``[0, world_size)`` or an address outside ``to_rank``'s heap stops the
    kernel (``translate``).

    Example::

        @triton.jit
        def put_and_signal(data, out, flag, rank, peer, heap_bases, copy_engine_ctx, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            iris.put_signal(data + offs, out + offs, rank, peer, heap_bases, copy_engine_ctx, flag, 1)

        data, out, flag = ctx.full((16,), float(rank)), ctx.zeros(16), ctx.zeros(1, dtype=torch.int32)
        ctx.barrier()  # every rank's out and flag are zeroed before a peer writes them
        peer = (rank + 1) % world_size
        put_and_signal[(1,)](data, out, flag, rank, peer, ctx.get_heap_bases(), ctx.get_copy_engine_ctx(), BLOCK=16)
        ctx.barrier()  # the peers' puts and signals have landed
        assert torch.all(out == (rank - 1) % world_size) and flag.item() == 1
    """
    put(from_ptr, to_ptr, from_rank, to_rank, heap_bases, mask=mask, hint=hint)
    _release_add(flag_ptr, flag_value, from_rank, to_rank, heap_bases)


@triton.jit
def put_signal_rect(from_ptr, to_ptr, from_rank, to_rank, heap_bases, copy_engine_ctx, flag_ptr, flag_value,
                    width_bytes: tl.constexpr, height: tl.constexpr, src_pitch: tl.constexpr,
                    dst_pitch: tl.constexpr, hint: tl.constexpr = None):
    """Copy ``height`` rows of ``width_bytes`` (pitches in bytes) from ``from_ptr`` to ``to_ptr`` on ``to_rank``,
    then ``*flag_ptr += flag_value`` there (release/sys). ``copy_engine_ctx`` and ``hint`` are not read. In debug
    mode (``IRIS_DEBUG=1``) a rank outside ``[0, world_size)`` or a rectangle's or flag's first address outside
    ``to_rank``'s heap stops the kernel (``translate``).

    Example::

        @triton.jit
        def put_window_and_signal(src, dst, flag, rank, peer, heap_bases, copy_engine_ctx):
            # rows 1..2, columns 0..3 of a 4 x 8 fp32 matrix: 16 bytes wide, 2 rows, 32-byte pitch on both sides
            iris.put_signal_rect(src + 8, dst + 8, rank, peer, heap_bases, copy_engine_ctx, flag, 1, 16, 2, 32, 32)

        src, dst, flag = ctx.full((4, 8), float(rank)), ctx.zeros(4, 8), ctx.zeros(1, dtype=torch.int32)
        ctx.barrier()  # every rank's dst and flag are zeroed before a peer writes them
        peer = (rank + 1) % world_size
        put_window_and_signal[(1,)](src, dst, flag, rank, peer, ctx.get_heap_bases(), ctx.get_copy_engine_ctx())
        ctx.barrier()  # the peers' windows and signals have landed
        ref = torch.zeros(4, 8)
        ref[1:3, :4] = (rank - 1) % world_size
        assert torch.equal(dst.cpu(), ref) and flag.item() == 1
    """
    _copy_rect(from_ptr, to_ptr, from_rank, to_rank, heap_bases, width_bytes, height, src_pitch, dst_pitch)
    _release_add(flag_ptr, flag_value, from_rank, to_rank, heap_bases)


@triton.jit
def wait_then_put_rect(from_ptr, to_ptr, from_rank, to_rank, heap_bases, copy_engine_ctx, wait_flag_ptr, wait_value,
                       width_bytes: tl.constexpr, height: tl.constexpr, src_pitch: tl.constexpr,
                       dst_pitch: tl.constexpr, hint: tl.constexpr = None):
    """Once the local ``*wait_flag_ptr >= wait_value`` (the calling program waits: see the module docstring), copy
    the rectangle to ``to_rank``. ``copy_engine_ctx`` and ``hint`` are not read. In debug mode (``IRIS_DEBUG=1``) a
    rank outside ``[0, world_size)`` or a rectangle's first address outside ``to_rank``'s heap stops the kernel
    (``translate``), and so does a wait that has not ended after ``IRIS_DEBUG_SPIN_LIMIT`` polls.

    Example::

        @triton.jit
        def put_window_when_asked(src, dst, gate, rank, peer, left, heap_bases, copy_engine_ctx):
            # tell left that our dst may be written (its gate), then wait for the peer to say the same of its dst
            iris.atomic_add(gate, 1, rank, left, heap_bases, sem="release", scope="sys")
            # rows 0..1, columns 2..5 of a 4 x 8 fp32 matrix: 16 bytes wide, 2 rows, 32-byte pitch on both sides
            iris.wait_then_put_rect(src + 2, dst + 2, rank, peer, heap_bases, copy_engine_ctx, gate, 1, 16, 2, 32, 32)

        src, dst, gate = ctx.full((4, 8), float(rank)), ctx.zeros(4, 8), ctx.zeros(1, dtype=torch.int32)
        ctx.barrier()  # every rank's dst and gate are zeroed before a peer writes them
        peer, left = (rank + 1) % world_size, (rank - 1) % world_size
        put_window_when_asked[(1,)](src, dst, gate, rank, peer, left, ctx.get_heap_bases(), ctx.get_copy_engine_ctx())
        ctx.barrier()  # the peers' windows have landed
        ref = torch.zeros(4, 8)
        ref[:2, 2:6] = left
        assert torch.equal(dst.cpu(), ref)
    """
    wait_until(wait_flag_ptr, wait_value, from_rank, -1, "wait_then_put_rect")  # -1: whoever raises it
    _copy_rect(from_ptr, to_ptr, from_rank, to_rank, heap_bases, width_bytes, height, src_pitch, dst_pitch)


@triton.jit
def wait_then_put_signal_rect(from_ptr, to_ptr, from_rank, to_rank, heap_bases, copy_engine_ctx, wait_flag_ptr,
                              wait_value, signal_flag_ptr, signal_value, width_bytes: tl.constexpr,
                              height: tl.constexpr, src_pitch: tl.constexpr, dst_pitch: tl.constexpr,
                              hint: tl.constexpr = None):
    """``wait_then_put_rect``, then ``*signal_flag_ptr += signal_value`` on ``to_rank`` (release/sys).
    ``copy_engine_ctx`` and ``hint`` are not read. In debug mode (``IRIS_DEBUG=1``) a rank outside ``[0, world_size)``
    or a rectangle's or flag's first address outside ``to_rank``'s heap stops the kernel (``translate``), and so does
    a wait that has not ended after ``IRIS_DEBUG_SPIN_LIMIT`` polls.

    Example::

        @triton.jit
        def put_window_when_asked_and_signal(src, dst, gate, flag, rank, peer, left, heap_bases, copy_engine_ctx):
            iris.atomic_add(gate, 1, rank, left, heap_bases, sem="release", scope="sys")  # left may write our dst
            # rows 2..3, columns 4..7 of a 4 x 8 fp32 matrix, once the peer says so; then +1 on the peer's flag
            iris.wait_then_put_signal_rect(src + 20, dst + 20, rank, peer, heap_bases, copy_engine_ctx, gate, 1, flag,
                                           1, 16, 2, 32, 32)

        src, dst = ctx.full((4, 8), float(rank)), ctx.zeros(4, 8)
        gate, flag = ctx.zeros(1, dtype=torch.int32), ctx.zeros(1, dtype=torch.int32)
        ctx.barrier()  # every rank's dst, gate and flag are zeroed before a peer writes them
        peer, left = (rank + 1) % world_size, (rank - 1) % world_size
        put_window_when_asked_and_signal[(1,)](src, dst, gate, flag, rank, peer, left, ctx.get_heap_bases(),
                                               ctx.get_copy_engine_ctx())
        ctx.barrier()  # the peers' windows and signals have landed
        ref = torch.zeros(4, 8)
        ref[2:, 4:] = left
        assert torch.equal(dst.cpu(), ref) and flag.item() == 1
    """
    wait_until(wait_flag_ptr, wait_value, from_rank, -1, "wait_then_put_signal_rect")
    _copy_rect(from_ptr, to_ptr, from_rank, to_rank, heap_bases, width_bytes, height, src_pitch, dst_pitch)
    _release_add(signal_flag_ptr, signal_value, from_rank, to_rank, heap_bases)
