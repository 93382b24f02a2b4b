"""Device-side tracing: kernels append (operation, target rank, bytes, program, SM, start, end) records.

``trace`` is the int64 tensor ``Iris.tracing.device_args()`` returns: ``[max_events, counter address,
buffer address, logical clock address]``; the buffer holds ``max_events`` rows of ``EVENT_WORDS`` int64.
A kernel takes ``trace`` and a ``TRACE: tl.constexpr`` flag; with ``TRACE`` false nothing here is compiled.

Times are the GPU's ``%globaltimer`` in nanoseconds; the Triton interpreter has no clock, so there a
logical clock (a shared counter advanced by every read) stands in, which keeps the order of events.
"""

import triton
import triton.language as tl

from iris.device.translate import INTERPRETED
from iris.device.utils import get_cu_id, read_realtime

EVENT_WORDS = tl.constexpr(8)  # op, target rank, bytes, program id, SM id, start, end, rank
# Operation ids that instrumented kernels record (names for the export: iris/host/tracing/).
OP_GEMM_TILE = tl.constexpr(1)
OP_SCATTER_TILE = tl.constexpr(2)


@triton.jit
def now(trace):
    """A timestamp: nanoseconds on GPUs, a logical clock in the interpreter."""
    if INTERPRETED:
        clock = tl.load(trace + 3).to(tl.pointer_type(tl.int64))
        return tl.atomic_add(clock, 1)
    else:
        return read_realtime()


@triton.jit
def record(trace, op_id, target, nbytes, start, rank):
    """Append one event that began at ``start`` and ends now. Events past ``max_events`` are dropped (the
    counter still counts them, so the host can say how many were lost)."""
    end = now(trace)
    max_events = tl.load(trace)
    counter = tl.load(trace + 1).to(tl.pointer_type(tl.int32))
    slot = tl.atomic_add(counter, 1, sem="relaxed")
    if slot < max_events:
        row = tl.load(trace + 2).to(tl.pointer_type(tl.int64)) + slot.to(tl.int64) * EVENT_WORDS
        tl.store(row + 0, op_id)
        tl.store(row + 1, target)
        tl.store(row + 2, nbytes)
        tl.store(row + 3, tl.program_id(0))
        tl.store(row + 4, get_cu_id())
        tl.store(row + 5, start)
        tl.store(row + 6, end)
        tl.store(row + 7, rank)


@triton.jit
def _read_clock_kernel(trace, out):
    """One program: ``out[0] = now()``; the host's common time origin, read right after a device barrier."""
    tl.store(out, now(trace))
