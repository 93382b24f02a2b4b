"""Upstream Iris's ``iris.device.utils`` (and ``iris.mem.utils``, ``iris.device_utils``): timers and topology a
kernel can read.

``read_realtime()`` returns an int64 timestamp from the GPU's global timer: ``%globaltimer`` on NVIDIA, which
counts nanoseconds (``iris.hip.get_wall_clock_rate()`` reports its 1e6 kHz, so upstream's
``cycles / (rate * 1e-3)`` conversion to microseconds holds). The Triton interpreter has no GPU timer; there it
returns the host's monotonic clock in nanoseconds, which keeps the order and the rough size of intervals.
"""

import time

import triton
import triton.language as tl

from iris.device.translate import INTERPRETED


if INTERPRETED:  # two definitions: the GPU compiler refuses any Python function a kernel references
    def _host_ns():
        return time.monotonic_ns()

    @triton.jit
    def read_realtime():
        """The host's monotonic clock in nanoseconds (the interpreter has no GPU timer)."""
        return tl.full((), _host_ns(), tl.int64)
else:
    @triton.jit
    def read_realtime():
        """The global timer (int64 nanoseconds on NVIDIA); not ordered with memory operations around it."""
        return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False,
                                         pack=1)


@triton.jit
def get_wall_clock():
    """The same timer as ``read_realtime`` (upstream's other name for it)."""
    return read_realtime()


@triton.jit
def get_cu_id():
    """The SM this program runs on (``%smid``); 0 in the interpreter."""
    if INTERPRETED:
        return tl.full((), 0, tl.int32)
    else:
        return tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], dtype=tl.int32, is_pure=True, pack=1)


@triton.jit
def get_xcc_id():
    """The die this program runs on: 0, an NVIDIA GPU being one die (AMD's XCC id upstream)."""
    return tl.full((), 0, tl.int32)


@triton.jit
def get_se_id():
    """The shader engine this program runs on: 0 (AMD's SE id upstream; NVIDIA exposes no such register)."""
    return tl.full((), 0, tl.int32)


__all__ = ["read_realtime", "get_wall_clock", "get_cu_id", "get_xcc_id", "get_se_id"]
