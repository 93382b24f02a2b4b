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

Types follow Triton: 32- and 64-bit integers and floats everywhere, fp16/bf16 for ``atomic_add`` only;
8- and 16-bit integers are refused at compile time with an error naming the operation and type. Operands are cast
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
    which orders it behind the program's earlier puts in the same way."""
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
    """``*remote -= val``; returns the old value (an add of ``-val``: the hardware has no subtract)."""
    remote = translate(pointer, from_rank, to_rank, heap_bases, hint, mask, "atomic_sub")
    _order_program_writes(sem)
    return tl.atomic_add(remote, -_operand(pointer, val), mask=mask, sem=sem, scope=scope)


@triton.jit
def atomic_xchg(pointer, val, from_rank, to_rank, heap_bases, mask=None, sem: tl.constexpr = None,
                scope: tl.constexpr = None, hint: tl.constexpr = None):
    """``*remote = val``; returns the old value."""
    remote = translate(pointer, from_rank, to_rank, heap_bases, hint, mask, "atomic_xchg")
    _order_program_writes(sem)
    return tl.atomic_xchg(remote, _operand(pointer, val), mask=mask, sem=sem, scope=scope)


@triton.jit
def atomic_and(pointer, val, from_rank, to_rank, heap_bases, mask=None, sem: tl.constexpr = None,
               scope: tl.constexpr = None, hint: tl.constexpr = None):
    """``*remote &= val``; returns the old value."""
    remote = translate(pointer, from_rank, to_rank, heap_bases, hint, mask, "atomic_and")
    _order_program_writes(sem)
    return tl.atomic_and(remote, _operand(pointer, val), mask=mask, sem=sem, scope=scope)


@triton.jit
def atomic_or(pointer, val, from_rank, to_rank, heap_bases, mask=None, sem: tl.constexpr = None,
              scope: tl.constexpr = None, hint: tl.constexpr = None):
    """``*remote |= val``; returns the old value."""
    remote = translate(pointer, from_rank, to_rank, heap_bases, hint, mask, "atomic_or")
    _order_program_writes(sem)
    return tl.atomic_or(remote, _operand(pointer, val), mask=mask, sem=sem, scope=scope)


@triton.jit
def atomic_xor(pointer, val, from_rank, to_rank, heap_bases, mask=None, sem: tl.constexpr = None,
               scope: tl.constexpr = None, hint: tl.constexpr = None):
    """``*remote ^= val``; returns the old value."""
    remote = translate(pointer, from_rank, to_rank, heap_bases, hint, mask, "atomic_xor")
    _order_program_writes(sem)
    return tl.atomic_xor(remote, _operand(pointer, val), mask=mask, sem=sem, scope=scope)


@triton.jit
def atomic_min(pointer, val, from_rank, to_rank, heap_bases, mask=None, sem: tl.constexpr = None,
               scope: tl.constexpr = None, hint: tl.constexpr = None):
    """``*remote = min(*remote, val)``; returns the old value."""
    remote = translate(pointer, from_rank, to_rank, heap_bases, hint, mask, "atomic_min")
    _order_program_writes(sem)
    return tl.atomic_min(remote, _operand(pointer, val), mask=mask, sem=sem, scope=scope)


@triton.jit
def atomic_max(pointer, val, from_rank, to_rank, heap_bases, mask=None, sem: tl.constexpr = None,
               scope: tl.constexpr = None, hint: tl.constexpr = None):
    """``*remote = max(*remote, val)``; returns the old value."""
    remote = translate(pointer, from_rank, to_rank, heap_bases, hint, mask, "atomic_max")
    _order_program_writes(sem)
    return tl.atomic_max(remote, _operand(pointer, val), mask=mask, sem=sem, scope=scope)


@triton.jit
def atomic_cas(pointer, cmp, val, from_rank, to_rank, heap_bases, sem: tl.constexpr = None,
               scope: tl.constexpr = None, hint: tl.constexpr = None, copy_engine_ctx=None,
               use_copy_engine: tl.constexpr = False, USE_COPY_ENGINE: tl.constexpr = False):
    """If ``*remote == cmp`` then ``*remote = val``; returns the old value either way. ``use_copy_engine`` as in
    ``atomic_add`` (no copy engine has a compare-and-swap; the SMs do it, ``sys``-scope)."""
    remote = translate(pointer, from_rank, to_rank, heap_bases, hint, None, "atomic_cas")
    if use_copy_engine or USE_COPY_ENGINE:
        _order_program_writes(sem)
        return tl.atomic_cas(remote, _operand(pointer, cmp), _operand(pointer, val), sem=sem, scope="sys")
    else:
        _order_program_writes(sem)
        return tl.atomic_cas(remote, _operand(pointer, cmp), _operand(pointer, val), sem=sem, scope=scope)
