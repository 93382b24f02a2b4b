"""Remote atomics.

The calling rank is ``from_rank``; the atomic is performed on ``pointer`` translated into ``to_rank``'s
heap, and the old value comes back to the caller.

Memory ordering, as in Triton (and the PTX memory model):
``sem`` is ``"relaxed"``, ``"acquire"``, ``"release"`` or ``"acq_rel"`` (``None`` means ``"acq_rel"``);
``scope`` is ``"cta"``, ``"gpu"`` or ``"sys"`` (``None`` means ``"gpu"``). A release makes the caller's
earlier writes visible to any thread that later acquires the same location *within the scope*. A flag
that a thread on another GPU reads must use ``scope="sys"``: a ``gpu``-scope release does not order the
writes for a reader on another device.

Release covers the whole program: Triton issues an atomic on a single address from one thread, with no
barrier before it, so a release would otherwise order only that thread's earlier stores, not those the
program's other warps made. With ``sem`` release or acq_rel (the default) the atomics below first
synchronise the program (``bar.sync``), and PTX release is cumulative over writes ordered before it that
way. Relaxed and acquire atomics pay nothing.

Types follow Triton: 32- and 64-bit integers and floats everywhere, fp16/bf16 for ``atomic_add`` and
``atomic_sub`` (an add of the negation) only; 8- and 16-bit integers are refused at compile time with an error naming the operation and type. Operands are cast
to the pointer's element type first, so ``atomic_cas(int64_ptr, 0, 1, ...)`` with Python ints compiles (Triton's
``tl.atomic_cas`` does not cast, and the GPU verifier refuses an int32 ``cmp`` beside an int64 pointer).
"""

import triton
import triton.language as tl

from iris.device.translate import translate


@triton.jit
def _order_program_writes(sem: tl.constexpr):
    if sem is None or sem == "release" or sem == "acq_rel":
        tl.debug_barrier()


@triton.jit
def _operand(pointer, value):
    """``value`` (a Python scalar or a tensor) as the element type ``pointer`` points to."""
    return tl.cast(value, pointer.dtype.element_ty)


@triton.jit
def atomic_add(pointer, val, from_rank, to_rank, heap_bases, mask=None, sem: tl.constexpr = None,
               scope: tl.constexpr = None, hint: tl.constexpr = None, copy_engine_ctx=None,
               use_copy_engine: tl.constexpr = False, USE_COPY_ENGINE: tl.constexpr = False):
    """``*remote += val``; returns the old value. With ``use_copy_engine`` (upstream's copy-engine atomic, ordered
    behind the caller's earlier copy-engine puts) it is a ``sys``-scope release (``sem`` if given) from the SMs,
    which orders it behind the program's earlier puts in the same way. Triton refuses 8- and 16-bit integers at
    compile time; in debug mode (``IRIS_DEBUG=1``) a rank outside ``[0, world_size)`` or an address outside
    ``to_rank``'s heap stops the kernel (``translate``).

    Example::

        @triton.jit
        def add_to_every_rank(counter, rank, world_size, heap_bases):
            for r in range(world_size):
                iris.atomic_add(counter, rank + 1, rank, r, heap_bases, sem="relaxed", scope="sys")

        counter = ctx.zeros(1, dtype=torch.int32)
        ctx.barrier()  # every rank's counter is zeroed before a peer adds to it
        add_to_every_rank[(1,)](counter, rank, world_size, ctx.get_heap_bases())
        ctx.barrier()  # every rank's adds have landed
        assert counter.item() == sum(r + 1 for r in range(world_size))
    """
    remote = translate(pointer, from_rank, to_rank, heap_bases, hint, mask, "atomic_add")
    if use_copy_engine or USE_COPY_ENGINE:
        if sem is None:
            tl.debug_barrier()
            return tl.atomic_add(remote, _operand(pointer, val), mask=mask, sem="release", scope="sys")
        else:
            _order_program_writes(sem)
            return tl.atomic_add(remote, _operand(pointer, val), mask=mask, sem=sem, scope="sys")
    else:
        _order_program_writes(sem)
        return tl.atomic_add(remote, _operand(pointer, val), mask=mask, sem=sem, scope=scope)


@triton.jit
def atomic_sub(pointer, val, from_rank, to_rank, heap_bases, mask=None, sem: tl.constexpr = None,
               scope: tl.constexpr = None, hint: tl.constexpr = None):
    """``*remote -= val``; returns the old value (an add of ``-val``: the hardware has no subtract). Triton refuses
    8- and 16-bit integers at compile time, as for ``atomic_add``; in debug mode (``IRIS_DEBUG=1``) a rank outside
    ``[0, world_size)`` or an address outside ``to_rank``'s heap stops the kernel (``translate``).

    Example::

        @triton.jit
        def take_from_peer(stock, old, rank, peer, heap_bases, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            tl.store(old + offs, iris.atomic_sub(stock + offs, offs, rank, peer, heap_bases))

        stock, old = ctx.full((8,), 100, dtype=torch.int32), ctx.zeros(8, dtype=torch.int32)
        ctx.barrier()  # every rank's stock is filled before a peer takes from it
        peer = (rank + 1) % world_size
        take_from_peer[(1,)](stock, old, rank, peer, ctx.get_heap_bases(), BLOCK=8)
        ctx.barrier()  # the peers' subtractions have landed
        assert torch.equal(stock.cpu(), 100 - torch.arange(8, dtype=torch.int32)) and torch.all(old == 100)
    """
    remote = translate(pointer, from_rank, to_rank, heap_bases, hint, mask, "atomic_sub")
    _order_program_writes(sem)
    return tl.atomic_add(remote, -_operand(pointer, val), mask=mask, sem=sem, scope=scope)


@triton.jit
def atomic_xchg(pointer, val, from_rank, to_rank, heap_bases, mask=None, sem: tl.constexpr = None,
                scope: tl.constexpr = None, hint: tl.constexpr = None):
    """``*remote = val``; returns the old value. Triton refuses 8- and 16-bit types (fp16 and bf16 too) at compile
    time; in debug mode (``IRIS_DEBUG=1``) a rank outside ``[0, world_size)`` or an address outside ``to_rank``'s
    heap stops the kernel (``translate``).

    Example::

        @triton.jit
        def swap_with_peer(slot, old, rank, peer, heap_bases):
            tl.store(old, iris.atomic_xchg(slot, rank, rank, peer, heap_bases))  # our rank in, the peer's value out

        slot, old = ctx.full((1,), -1, dtype=torch.int32), ctx.zeros(1, dtype=torch.int32)
        ctx.barrier()  # every rank's slot is set before a peer swaps it
        peer = (rank + 1) % world_size
        swap_with_peer[(1,)](slot, old, rank, peer, ctx.get_heap_bases())
        ctx.barrier()  # the peers' swaps have landed
        assert slot.item() == (rank - 1) % world_size and old.item() == -1
    """
    remote = translate(pointer, from_rank, to_rank, heap_bases, hint, mask, "atomic_xchg")
    _order_program_writes(sem)
    return tl.atomic_xchg(remote, _operand(pointer, val), mask=mask, sem=sem, scope=scope)


@triton.jit
def atomic_and(pointer, val, from_rank, to_rank, heap_bases, mask=None, sem: tl.constexpr = None,
               scope: tl.constexpr = None, hint: tl.constexpr = None):
    """``*remote &= val``; returns the old value. Triton refuses 8- and 16-bit types (fp16 and bf16 too) at compile
    time; in debug mode (``IRIS_DEBUG=1``) a rank outside ``[0, world_size)`` or an address outside ``to_rank``'s
    heap stops the kernel (``translate``).

    Example::

        @triton.jit
        def clear_bit_on_peer(word, old, rank, peer, heap_bases):
            tl.store(old, iris.atomic_and(word, ~(1 << rank), rank, peer, heap_bases))  # our bit off on the peer

        word, old = ctx.full((1,), 0xFF, dtype=torch.int32), ctx.zeros(1, dtype=torch.int32)
        ctx.barrier()  # every rank's word is set before a peer changes it
        peer = (rank + 1) % world_size
        clear_bit_on_peer[(1,)](word, old, rank, peer, ctx.get_heap_bases())
        ctx.barrier()  # the peers' ands have landed
        assert word.item() == 0xFF & ~(1 << (rank - 1) % world_size) and old.item() == 0xFF
    """
    remote = translate(pointer, from_rank, to_rank, heap_bases, hint, mask, "atomic_and")
    _order_program_writes(sem)
    return tl.atomic_and(remote, _operand(pointer, val), mask=mask, sem=sem, scope=scope)


@triton.jit
def atomic_or(pointer, val, from_rank, to_rank, heap_bases, mask=None, sem: tl.constexpr = None,
              scope: tl.constexpr = None, hint: tl.constexpr = None):
    """``*remote |= val``; returns the old value. Triton refuses 8- and 16-bit types (fp16 and bf16 too) at compile
    time; in debug mode (``IRIS_DEBUG=1``) a rank outside ``[0, world_size)`` or an address outside ``to_rank``'s
    heap stops the kernel (``translate``).

    Example::

        @triton.jit
        def announce_to_every_rank(arrived, rank, world_size, heap_bases):
            for r in range(world_size):
                iris.atomic_or(arrived, 1 << rank, rank, r, heap_bases)  # our bit, on every rank

        arrived = ctx.zeros(1, dtype=torch.int32)
        ctx.barrier()  # every rank's word is zeroed before a peer sets bits in it
        announce_to_every_rank[(1,)](arrived, rank, world_size, ctx.get_heap_bases())
        ctx.barrier()  # every rank's ors have landed
        assert arrived.item() == (1 << world_size) - 1
    """
    remote = translate(pointer, from_rank, to_rank, heap_bases, hint, mask, "atomic_or")
    _order_program_writes(sem)
    return tl.atomic_or(remote, _operand(pointer, val), mask=mask, sem=sem, scope=scope)


@triton.jit
def atomic_xor(pointer, val, from_rank, to_rank, heap_bases, mask=None, sem: tl.constexpr = None,
               scope: tl.constexpr = None, hint: tl.constexpr = None):
    """``*remote ^= val``; returns the old value. Triton refuses 8- and 16-bit types (fp16 and bf16 too) at compile
    time; in debug mode (``IRIS_DEBUG=1``) a rank outside ``[0, world_size)`` or an address outside ``to_rank``'s
    heap stops the kernel (``translate``).

    Example::

        @triton.jit
        def toggle_on_peer(bits, old, rank, peer, heap_bases, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            tl.store(old + offs, iris.atomic_xor(bits + offs, offs, rank, peer, heap_bases))

        bits, old = ctx.full((8,), 0b1010, dtype=torch.int32), ctx.zeros(8, dtype=torch.int32)
        ctx.barrier()  # every rank's bits are set before a peer toggles them
        peer = (rank + 1) % world_size
        toggle_on_peer[(1,)](bits, old, rank, peer, ctx.get_heap_bases(), BLOCK=8)
        ctx.barrier()  # the peers' xors have landed
        assert torch.equal(bits.cpu(), 0b1010 ^ torch.arange(8, dtype=torch.int32)) and torch.all(old == 0b1010)
    """
    remote = translate(pointer, from_rank, to_rank, heap_bases, hint, mask, "atomic_xor")
    _order_program_writes(sem)
    return tl.atomic_xor(remote, _operand(pointer, val), mask=mask, sem=sem, scope=scope)


@triton.jit
def atomic_min(pointer, val, from_rank, to_rank, heap_bases, mask=None, sem: tl.constexpr = None,
               scope: tl.constexpr = None, hint: tl.constexpr = None):
    """``*remote = min(*remote, val)``; returns the old value. Triton refuses 8- and 16-bit types (fp16 and bf16 too)
    at compile time; in debug mode (``IRIS_DEBUG=1``) a rank outside ``[0, world_size)`` or an address outside
    ``to_rank``'s heap stops the kernel (``translate``).

    Example::

        @triton.jit
        def lower_on_every_rank(best, rank, world_size, heap_bases, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            offer = tl.abs(offs - 3 * rank).to(tl.float32)  # [BLOCK]
            for r in range(world_size):
                iris.atomic_min(best + offs, offer, rank, r, heap_bases)

        best = ctx.full((8,), float("inf"))
        ctx.barrier()  # every rank's best is set before a peer lowers it
        lower_on_every_rank[(1,)](best, rank, world_size, ctx.get_heap_bases(), BLOCK=8)
        ctx.barrier()  # every rank's mins have landed
        offers = torch.stack([(torch.arange(8.0) - 3 * r).abs() for r in range(world_size)])
        assert torch.equal(best.cpu(), offers.amin(0))
    """
    remote = translate(pointer, from_rank, to_rank, heap_bases, hint, mask, "atomic_min")
    _order_program_writes(sem)
    return tl.atomic_min(remote, _operand(pointer, val), mask=mask, sem=sem, scope=scope)


@triton.jit
def atomic_max(pointer, val, from_rank, to_rank, heap_bases, mask=None, sem: tl.constexpr = None,
               scope: tl.constexpr = None, hint: tl.constexpr = None):
    """``*remote = max(*remote, val)``; returns the old value. Triton refuses 8- and 16-bit types (fp16 and bf16 too)
    at compile time; in debug mode (``IRIS_DEBUG=1``) a rank outside ``[0, world_size)`` or an address outside
    ``to_rank``'s heap stops the kernel (``translate``).

    Example::

        @triton.jit
        def raise_on_every_rank(best, rank, world_size, heap_bases, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            offer = tl.abs(offs - 3 * rank).to(tl.float32)  # [BLOCK]
            for r in range(world_size):
                iris.atomic_max(best + offs, offer, rank, r, heap_bases)

        best = ctx.full((8,), float("-inf"))
        ctx.barrier()  # every rank's best is set before a peer raises it
        raise_on_every_rank[(1,)](best, rank, world_size, ctx.get_heap_bases(), BLOCK=8)
        ctx.barrier()  # every rank's maxes have landed
        offers = torch.stack([(torch.arange(8.0) - 3 * r).abs() for r in range(world_size)])
        assert torch.equal(best.cpu(), offers.amax(0))
    """
    remote = translate(pointer, from_rank, to_rank, heap_bases, hint, mask, "atomic_max")
    _order_program_writes(sem)
    return tl.atomic_max(remote, _operand(pointer, val), mask=mask, sem=sem, scope=scope)


@triton.jit
def atomic_cas(pointer, cmp, val, from_rank, to_rank, heap_bases, sem: tl.constexpr = None,
               scope: tl.constexpr = None, hint: tl.constexpr = None, copy_engine_ctx=None,
               use_copy_engine: tl.constexpr = False, USE_COPY_ENGINE: tl.constexpr = False):
    """If ``*remote == cmp`` then ``*remote = val``; returns the old value either way. ``use_copy_engine`` as in
    ``atomic_add`` (no copy engine has a compare-and-swap; the SMs do it, ``sys``-scope). Triton refuses 8-bit types
    at compile time; in debug mode (``IRIS_DEBUG=1``) a rank outside ``[0, world_size)`` or an address outside
    ``to_rank``'s heap stops the kernel (``translate``).

    Example::

        @triton.jit
        def claim_on_peer(slot, olds, rank, peer, heap_bases):
            tl.store(olds, iris.atomic_cas(slot, 0, rank + 1, rank, peer, heap_bases, sem="acquire", scope="sys"))
            # the slot holds rank + 1 now: this compare fails and returns it, changing nothing
            tl.store(olds + 1, iris.atomic_cas(slot, 0, -1, rank, peer, heap_bases, sem="acquire", scope="sys"))

        slot, olds = ctx.zeros(1, dtype=torch.int32), ctx.full((2,), -7, dtype=torch.int32)
        ctx.barrier()  # every rank's slot is zeroed before a peer claims it
        peer = (rank + 1) % world_size
        claim_on_peer[(1,)](slot, olds, rank, peer, ctx.get_heap_bases())
        ctx.barrier()  # the peers' claims have landed
        assert slot.item() == (rank - 1) % world_size + 1 and olds.tolist() == [0, rank + 1]
    """
    remote = translate(pointer, from_rank, to_rank, heap_bases, hint, None, "atomic_cas")
    if use_copy_engine or USE_COPY_ENGINE:
        _order_program_writes(sem)
        return tl.atomic_cas(remote, _operand(pointer, cmp), _operand(pointer, val), sem=sem, scope="sys")
    else:
        _order_program_writes(sem)
        return tl.atomic_cas(remote, _operand(pointer, cmp), _operand(pointer, val), sem=sem, scope=scope)
