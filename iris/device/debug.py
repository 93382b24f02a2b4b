"""Debug mode: bounds-checked translation and bounded waits, compiled in only when asked for.

``IRIS_DEBUG=1`` in the environment (or ``iris.iris(..., debug=True)`` before the first kernel compiles)
turns on:

- every translated address is checked to lie inside the target rank's heap (masked-off lanes excepted),
  both ranks to lie in ``[0, world_size)`` and on this node (``ctx.direct``: off-node heaps are never mapped);
  a violation prints the operation, the ranks (and both nodes, or the byte offset)
  and stops the kernel (a device assert on GPUs, a Python ``AssertionError`` on the cpu backend);
- every device-side wait (``device_barrier``, collective handshakes) gives up after ``SPIN_LIMIT`` polls,
  printing which rank waited for which rank's flag and for what value.

When off, ``ENABLED`` is a false constexpr and the checks are not compiled at all: the PTX is identical.

The checks read two words that every bases table iris hands out carries (``heap_bases``,
``get_device_context``, ``allocate_symmetric``'s ``peer_bases``), each laid out as the device context is,
``[rank, world_size, base_0, ..., base_{W-1}, TRACE_WORDS tracing words, extent]``: ``table[-1]`` the world size and
``table[W + TRACE_WORDS]`` the bytes each base addresses. A bases table built by hand has no such words; don't use
one in debug mode.
"""

import os

import triton
import triton.language as tl

from iris.platform.backend import BACKEND

ENABLED = tl.constexpr(os.environ.get("IRIS_DEBUG", "") == "1")
# The tracing words after the bases in the device context, upstream Iris's: trace_enabled, max_events, the event
# counter, the operation counter, then 13 buffer addresses.
TRACE_WORDS = tl.constexpr(17)
# Polls before a wait gives up: 2**22 is a few seconds on a GPU; the interpreter polls some 1,300 times a second, so
# 2**16 there (about 50 s).
SPIN_LIMIT = tl.constexpr(int(os.environ.get("IRIS_DEBUG_SPIN_LIMIT", 1 << 16 if BACKEND == "cpu" else 1 << 22)))


@triton.jit
def check_ranks(from_rank, to_rank, heap_bases, op: tl.constexpr):
    world_size = tl.load(heap_bases - 1)
    ok = (from_rank >= 0) & (from_rank < world_size) & (to_rank >= 0) & (to_rank < world_size)
    if not ok:
        tl.device_print("iris debug: " + op + " rank out of range: from_rank, to_rank, world_size", from_rank,
                        to_rank, world_size)
    tl.device_assert(ok, "iris." + op + ": a rank argument is outside [0, world_size) (IRIS_DEBUG)")
    # A rank on another node has a negative entry, -(1 + (this node << 16 | its node)) (iris/host/topology.py).
    # (ranks out of range read entry 0: the assert above has already fired, and on GPUs a read past the table could
    # land anywhere)
    code = tl.minimum(tl.load(heap_bases + tl.where(ok, from_rank, 0)), tl.load(heap_bases + tl.where(ok, to_rank, 0)))
    mapped = code > 0
    if not mapped:
        packed = -1 - code
        tl.device_print("iris debug: " + op + " to a rank on another node: from_rank, to_rank, this node, its node",
                        from_rank, to_rank, packed >> 16, packed & 0xFFFF)
    tl.device_assert(mapped, "iris." + op + ": a rank on another node; heaps are mapped within a node only, see "
                     "ctx.direct (IRIS_DEBUG)")


@triton.jit
def check_offset(offset, elem_bytes, from_rank, to_rank, heap_bases, mask, op: tl.constexpr):
    extent = tl.load(heap_bases + tl.load(heap_bases - 1) + TRACE_WORDS).to(tl.uint64)
    # An address below the base wraps to a huge unsigned offset, so one comparison covers both ends.
    inside = offset + elem_bytes <= extent
    if mask is not None:
        inside = inside | ~mask
    # Scalar and block pointers reduce apart: a block made here would need a layout in Gluon kernels
    if inside.type.is_block():
        outside = tl.sum((~inside).to(tl.int32))
        first_bad = tl.max(tl.where(inside, 0, offset))
    else:
        outside = (~inside).to(tl.int32)
        first_bad = offset
    if outside > 0:
        tl.device_print("iris debug: " + op + " outside the heap: from_rank, to_rank, byte offset, heap bytes",
                        from_rank, to_rank, first_bad, extent)
    tl.device_assert(outside == 0, "iris." + op + ": address outside the target rank's symmetric heap (IRIS_DEBUG)")


@triton.jit
def check_wait(spins, rank, peer, seen, expected, what: tl.constexpr):
    if spins >= SPIN_LIMIT:
        tl.device_print("iris debug: " + what + " timed out: rank, waiting for rank, flag value seen, expected",
                        rank, peer, seen, expected)
    tl.device_assert(spins < SPIN_LIMIT, "iris." + what + ": device wait timed out (IRIS_DEBUG): its flag never "
                     "reached the value waited for; the rank or program that raises it never did (on the cpu backend "
                     "a launch's programs run one at a time, so a later program of the same launch never can)")
