"""Address translation: the one place that computes a peer's address.

Every rank maps every peer's symmetric heap and keeps ``heap_bases[r]``, the address at which rank ``r``'s
heap appears in *this* process. An allocation lands at the same offset on every rank, so a pointer into
our heap becomes a pointer into a peer's heap by swapping the base:

    remote = ptr - heap_bases[from_rank] + heap_bases[to_rank]
"""

import os

import triton
import triton.language as tl

from iris.device.debug import ENABLED, check_offset, check_ranks


DEBUG = ENABLED  # a module constant the compiler folds: no code at all when debug mode is off
# Under the Triton interpreter (the CPU backend) there is no inline PTX and no GPU clock: the device code
# that uses them branches on this constant.
INTERPRETED = tl.constexpr(os.environ.get("TRITON_INTERPRET") == "1")


@triton.jit
def translate(ptr, from_rank, to_rank, heap_bases, hint: tl.constexpr = None, mask=None,
              op: tl.constexpr = "translate"):
    """Translate ``ptr``, an address in ``from_rank``'s heap as this process sees it, to ``to_rank``'s heap.

    ``ptr`` may be a scalar pointer or a block of pointers. ``hint`` (an int or a tuple, one entry per
    dimension) restates the alignment and contiguity that the arithmetic hides from the compiler, so
    that remote accesses stay vectorised: the same value ``tl.multiple_of`` / ``tl.max_contiguous`` take.
    ``mask`` and ``op`` only serve debug mode (``iris/device/debug.py``): lanes it checks, name it reports.
    """
    if DEBUG:
        check_ranks(from_rank, to_rank, heap_bases, op)
    from_base = tl.load(heap_bases + from_rank)
    to_base = tl.load(heap_bases + to_rank)
    # Byte arithmetic on an int8 pointer: the offset is in bytes whatever the element type.
    offset = tl.cast(ptr, tl.uint64) - from_base.to(tl.uint64)
    remote = tl.cast(to_base, tl.pointer_type(tl.int8)) + offset
    remote = tl.cast(remote, ptr.dtype)
    if DEBUG:
        check_offset(offset, ptr.dtype.element_ty.primitive_bitwidth // 8, from_rank, to_rank, heap_bases, mask, op)
    if hint is not None:
        remote = tl.max_contiguous(tl.multiple_of(remote, hint), hint)
    return remote
