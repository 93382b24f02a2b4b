"""``TraceEvent``: upstream Iris's table of trace event ids, usable inside kernels (``TraceEvent().put``) and on the
host (``TraceEvent().put == 3``).

Ranges: 0-1023 iris operations (data movement, atomics), 1024-2047 user data movement, 2048-3071 user compute,
3072-4095 synchronisation. ``EVENT_NAMES`` maps each id to its name, for exports.
"""

import os

import triton
import triton.language as tl

EVENT_NAMES = {
    0: "load", 1: "store", 2: "get", 3: "put", 4: "copy", 5: "atomic_add", 6: "atomic_sub", 7: "atomic_cas",
    8: "atomic_xchg", 9: "atomic_xor", 10: "atomic_and", 11: "atomic_or", 12: "atomic_min", 13: "atomic_max",
    14: "wg_fetch", 15: "wg_gemm", 16: "wg_gemm_wait", 17: "wg_sdma",
    1024: "fetch", 2048: "compute", 2049: "reduce", 3072: "wait", 3073: "barrier",
}


def _fill(event):
    for event_id, name in EVENT_NAMES.items():
        setattr(event, name, tl.constexpr(event_id))


def _interpreted_class():
    class TraceEvent:
        def __init__(self):
            _fill(self)

    return TraceEvent


def _compiled_class():
    # The compiler takes an aggregate whose fields are declared; its __init__ runs at compile time.
    from triton.language.core import _aggregate

    class TraceEvent:
        __annotations__ = {name: tl.constexpr for name in EVENT_NAMES.values()}

        @triton.constexpr_function
        def __init__(self):  # spelled out: the compiler refuses calls to plain functions here (EVENT_NAMES above)
            self.load = tl.constexpr(0)
            self.store = tl.constexpr(1)
            self.get = tl.constexpr(2)
            self.put = tl.constexpr(3)
            self.copy = tl.constexpr(4)
            self.atomic_add = tl.constexpr(5)
            self.atomic_sub = tl.constexpr(6)
            self.atomic_cas = tl.constexpr(7)
            self.atomic_xchg = tl.constexpr(8)
            self.atomic_xor = tl.constexpr(9)
            self.atomic_and = tl.constexpr(10)
            self.atomic_or = tl.constexpr(11)
            self.atomic_min = tl.constexpr(12)
            self.atomic_max = tl.constexpr(13)
            self.wg_fetch = tl.constexpr(14)
            self.wg_gemm = tl.constexpr(15)
            self.wg_gemm_wait = tl.constexpr(16)
            self.wg_sdma = tl.constexpr(17)
            self.fetch = tl.constexpr(1024)
            self.compute = tl.constexpr(2048)
            self.reduce = tl.constexpr(2049)
            self.wait = tl.constexpr(3072)
            self.barrier = tl.constexpr(3073)

    return _aggregate(TraceEvent)


TraceEvent = _interpreted_class() if os.environ.get("TRITON_INTERPRET") == "1" else _compiled_class()
TraceEvent.__doc__ = __doc__
