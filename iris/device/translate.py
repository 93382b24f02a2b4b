"""Address translation: the one place that computes a peer's address.

Every rank maps every peer's symmetric heap and keeps ``heap_bases[r]``, the address at which rank ``r``'s
heap appears in *this* process. An allocation lands at the same offset on every rank, so a pointer into
our heap becomes a pointer into a peer's heap by swapping the base:

    remote = ptr - heap_bases[from_rank] + heap_bases[to_rank]

computed as ``ptr + (heap_bases[to_rank] - heap_bases[from_rank]) // element_size``: pointer arithmetic on the
pointer itself, so that what the compiler knows of ``ptr`` (alignment, contiguity) carries over to the remote
pointer, and an access without a ``hint`` is as wide as the same access to local memory.
"""

import os

import triton
import triton.language as tl

from iris.device.debug import ENABLED, check_offset, check_ranks


DEBUG = ENABLED  # a module constant the compiler folds: no code at all when debug mode is off
# Under the Triton interpreter (the CPU backend) there is no inline PTX and no GPU clock: the device code
# that uses them branches on this constant.
INTERPRETED = tl.constexpr(os.environ.get("TRITON_INTERPRET") == "1")
# Every rank's heap base is a multiple of this many bytes; ``iris/iris.py`` refuses a context whose bases
# are not (``check_base_alignment``). Heaps start at a page (cpu, 4 KiB), a VMM granule (64 KiB cpu, 2 MiB cuda) or
# a torch block inside a cudaMalloc allocation (512 bytes), so the claim holds with room on every backend; 256
# bytes covers a 16-byte vector of every element type several times over.
BASE_ALIGNMENT = tl.constexpr(256)


def misaligned_bases(bases):
    """``(rank, base)`` of every heap base in ``bases`` that is not a multiple of ``BASE_ALIGNMENT`` bytes."""
    return [(rank, base) for rank, base in enumerate(bases) if base % BASE_ALIGNMENT.value]


def check_base_alignment(bad, caller="iris.iris"):
    """Raise if ``bad`` (``misaligned_bases`` of every rank) names a base: ``translate`` tells the compiler that the
    bases' differences are multiples of ``BASE_ALIGNMENT``, and a false claim would misalign vector accesses."""
    if bad:
        listed = ", ".join(f"rank {rank} at {base:#x} (seen by rank {seen})" for seen, rank, base in bad)
        raise RuntimeError(f"{caller}: symmetric heap bases must be multiples of {BASE_ALIGNMENT.value} bytes for "
                           f"remote accesses to be translated correctly; got {listed}. The heap's memory came unaligned "
                           "from its allocator; allocator_type='vmem' maps heaps at granule-aligned addresses")


@triton.jit
def translate(ptr, from_rank, to_rank, heap_bases, hint: tl.constexpr = None, mask=None,
              op: tl.constexpr = "translate"):
    """Translate ``ptr``, an address in ``from_rank``'s heap as this process sees it, to ``to_rank``'s heap.

    ``ptr`` may be a scalar pointer or a block of pointers. ``hint`` (an int or a tuple, one entry per
    dimension) restates the alignment and contiguity that the arithmetic hides from the compiler, so
    that remote accesses stay vectorised: the same value ``tl.multiple_of`` / ``tl.max_contiguous`` take.
    ``mask`` and ``op`` only serve debug mode (``iris/device/debug.py``): lanes it checks, name it reports.

    Example::

        @triton.jit
        def read_through_translate(data, out, rank, peer, heap_bases, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            remote = iris.translate(data + offs, rank, peer, heap_bases)  # our offsets, in the peer's heap
            tl.store(out + offs, tl.load(remote))

        data, out = ctx.full((16,), float(rank)), ctx.zeros(16)
        ctx.barrier()  # every rank's data is written before a peer reads it
        peer = (rank + 1) % world_size
        read_through_translate[(1,)](data, out, rank, peer, ctx.get_heap_bases(), BLOCK=16)
        assert torch.all(out == peer)
    """
    if DEBUG:
        check_ranks(from_rank, to_rank, heap_bases, op)
    from_base = tl.load(heap_bases + from_rank)
    to_base = tl.load(heap_bases + to_rank)
    elem_bytes: tl.constexpr = (ptr.dtype.element_ty.primitive_bitwidth + 7) // 8
    # The base difference added to the pointer, not a round trip through an integer: the pointer keeps the
    # alignment and contiguity the compiler knows of it, so a contiguous block of a 16-byte aligned tensor still
    # moves as 16-byte vectors. The context checks at creation that every heap base is a multiple of
    # BASE_ALIGNMENT bytes, which the compiler is told of the difference. It is added in bytes, through an int8
    # view of the pointer (a bitcast the compiler's alignment analysis sees through): an element offset would
    # cost a signed division and a multiply on every translation (8 more instructions per call on sm_90).
    delta = tl.multiple_of((to_base - from_base).to(tl.int64), BASE_ALIGNMENT)
    remote = (ptr.to(tl.pointer_type(tl.int8, ptr.dtype.address_space)) + delta).to(ptr.dtype)
    if DEBUG:
        offset = tl.cast(ptr, tl.uint64) - from_base.to(tl.uint64)
        check_offset(offset, elem_bytes, from_rank, to_rank, heap_bases, mask, op)
    if hint is not None:
        remote = tl.max_contiguous(tl.multiple_of(remote, hint), hint)
    return remote
