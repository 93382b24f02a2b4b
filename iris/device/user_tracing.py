"""``ctx.tracing`` inside user kernels: upstream Iris's ``record_event_start`` / ``record_event_end``, for the Triton
``DeviceContext`` and Gluon's ``IrisDeviceCtx`` alike.

    ctx = iris.DeviceContext.initialize(context, RANK, WORLD_SIZE, tracing=True)
    handle = ctx.tracing.record_event_start(event_id=TraceEvent().put, target_rank=peer, address=ptrs,
                                            pid_m=pid_m, pid_n=pid_n, mask=mask)
    ctx.put(...)
    ctx.tracing.record_event_end(handle)

Events go to the 13 buffers (one array per field, upstream's) whose addresses ``ctx.tracing.enable`` writes into the
device context's tracing words: ``words = [trace_enabled, max_events, event counter, operation counter, event_id,
pid, pid_m, pid_n, cur_rank, target_rank, xcc_id, cu_id, timestamp, address, duration_cycles, op_index,
payload_size]``. ``timestamp`` is the start and ``duration_cycles`` the end (upstream's use of the names), both
``%globaltimer`` nanoseconds on NVIDIA (upstream's are AMD ``s_memrealtime`` ticks), the host's monotonic clock in
nanoseconds in the interpreter (``read_realtime``: one clock for every rank of the machine); ``op_index`` numbers the
operations 0, 1, 2, ... (the operation counter, upstream's); ``xcc_id`` is 0 (no chiplets) and ``cu_id`` the SM
(``%smid``). Events past ``max_events`` are counted and dropped. With ``tracing=False`` (a constexpr) nothing is
compiled.
"""

import os

import triton
import triton.language as tl

from iris.device.utils import get_cu_id, read_realtime

# word indices in the tracing words
_MAX_EVENTS, _COUNTER, _OPS = tl.constexpr(1), tl.constexpr(2), tl.constexpr(3)
(_EVENT_ID, _PID, _PID_M, _PID_N, _CUR_RANK, _TARGET, _XCC, _CU, _START, _ADDRESS, _END, _OP_INDEX,
 _PAYLOAD) = (tl.constexpr(i) for i in range(4, 17))


@triton.jit
def _words_ptr(words, index: tl.constexpr, dtype: tl.constexpr):
    return tl.load(words + index).to(tl.pointer_type(dtype))


@triton.jit
def _first_address(address):
    """One address per event: a block's lowest (upstream's ``tl.min``)."""
    if address.type.is_block():
        return tl.min(tl.cast(address, tl.int64))
    else:
        return tl.cast(address, tl.int64)


@triton.jit
def _payload_bytes(address, mask):
    elem_bytes = address.dtype.element_ty.primitive_bitwidth // 8
    if mask is None:
        return address.numel * elem_bytes
    elif mask.type.is_block():
        return tl.sum(mask.to(tl.int32)) * elem_bytes
    else:
        return mask.to(tl.int32) * elem_bytes


@triton.jit
def _words(heap_bases):
    """The tracing words: after the bases, whose count (the world size) sits just before them."""
    return heap_bases + tl.load(heap_bases - 1)


class _Methods:
    def record_event_start(self, event_id: tl.constexpr, target_rank, address, pid_m, pid_n, mask=None):
        """Open one event; returns the handle ``record_event_end`` closes. A no-op (handle 0) without tracing, and
        in a kernel compiled with tracing whose context has it off (its words are zero: no counter to count in)."""
        # Everything inside one constexpr branch: a kernel compiled without tracing holds none of it (an early return
        # would still build the rest into the IR, reductions included, which an AMD layout cannot pass on NVIDIA).
        slot = 0
        if self.enabled:
            words = _words(self.heap_bases)
            max_events = tl.load(words + _MAX_EVENTS)
            slot = max_events.to(tl.int32)  # 0 when off: a handle record_event_end leaves alone
            if max_events > 0:
                start = read_realtime()
                slot = tl.atomic_add(_words_ptr(words, _COUNTER, tl.int32), 1, sem="relaxed")
                op_index = tl.atomic_add(_words_ptr(words, _OPS, tl.int32), 1, sem="relaxed")
                if slot < max_events:
                    tl.store(_words_ptr(words, _EVENT_ID, tl.int32) + slot, event_id)
                    tl.store(_words_ptr(words, _PID, tl.int32) + slot, tl.program_id(0))
                    tl.store(_words_ptr(words, _PID_M, tl.int32) + slot, pid_m)
                    tl.store(_words_ptr(words, _PID_N, tl.int32) + slot, pid_n)
                    tl.store(_words_ptr(words, _CUR_RANK, tl.int32) + slot, tl.load(self.heap_bases - 2))  # context[0]
                    tl.store(_words_ptr(words, _TARGET, tl.int32) + slot, target_rank)
                    tl.store(_words_ptr(words, _XCC, tl.int32) + slot, 0)
                    tl.store(_words_ptr(words, _CU, tl.int32) + slot, get_cu_id())
                    tl.store(_words_ptr(words, _START, tl.int64) + slot, start)
                    tl.store(_words_ptr(words, _ADDRESS, tl.int64) + slot, _first_address(address))
                    tl.store(_words_ptr(words, _END, tl.int64) + slot, 0)
                    tl.store(_words_ptr(words, _OP_INDEX, tl.int32) + slot, op_index)
                    tl.store(_words_ptr(words, _PAYLOAD, tl.int32) + slot, _payload_bytes(address, mask))
        return slot

    def record_event_end(self, handle):
        """Close the event ``handle`` opened (its end time)."""
        if self.enabled:
            words = _words(self.heap_bases)
            end = read_realtime()
            if handle < tl.load(words + _MAX_EVENTS):
                tl.store(_words_ptr(words, _END, tl.int64) + handle, end)


def _interpreted_class():
    class DeviceTracing:
        def __init__(self, enabled, heap_bases):
            self.enabled = tl.constexpr(enabled)
            self.heap_bases = heap_bases

    for name in ("record_event_start", "record_event_end"):
        setattr(DeviceTracing, name, vars(_Methods)[name])
    return DeviceTracing


def _compiled_class():
    from triton.language.core import _aggregate

    class DeviceTracing:
        enabled: tl.constexpr
        heap_bases: tl.tensor

        @triton.constexpr_function
        def __init__(self, enabled, heap_bases):
            self.enabled = tl.constexpr(enabled)
            self.heap_bases = heap_bases

    for name in ("record_event_start", "record_event_end"):
        setattr(DeviceTracing, name, triton.jit(vars(_Methods)[name]))
    return _aggregate(DeviceTracing)


DeviceTracing = _interpreted_class() if os.environ.get("TRITON_INTERPRET") == "1" else _compiled_class()
DeviceTracing.__doc__ = __doc__
DeviceTracing.__qualname__ = "DeviceTracing"
