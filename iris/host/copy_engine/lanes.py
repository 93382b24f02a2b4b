"""A lane: one queue of copy-engine work (copies into peers' heaps and the flag operations that order them), run in
the order it was queued. The fused ops' copy queue (``queue.py``) has one lane; the copy-engine API (``api.py``)
one per (peer, channel). One interface, ``Lane``, two implementations, picked once by ``lane_type`` where a lane
is made; nothing that uses a lane asks which backend it runs on:

    CudaLane   a CUDA stream: copies as cuMemcpyAsync / cuMemcpy2DAsync (a copy engine over NVLink), waits and
               writes as stream memory operations (cuStreamWaitValue32/64, cuStreamWriteValue32), adds as a
               one-program kernel; ordered against the compute stream through an event
    HostLane   the cpu backend: a host thread runs the same operations in order on the shared pages, beside the
               interpreted kernels; its waits poll with the context's timeout

Operations name memory by address (``Wait``, ``Copy``, ``Signal``), flags a host joins on by one-element int32
tensors, so that one call means the same on both.
"""

import abc
import contextlib
import functools
import queue
import threading
import time
from typing import NamedTuple, Optional

import torch

from iris.platform import cuda_driver, private
from iris.errors import RankTimeoutError
from iris.logging import logger
from iris.host.distributed import DEFAULT_TIMEOUT_S


class Wait(NamedTuple):
    """Later work on the lane waits until the int32/int64 (``bits``) flag at ``address`` reaches ``value``."""
    address: int
    bits: int
    value: int


class Signal(NamedTuple):
    """Add ``value`` (release) to the int32/int64 (``bits``) flag at ``address``, after the copies before it."""
    address: int
    bits: int
    value: int


class Copy(NamedTuple):
    """``height`` rows of ``width`` bytes from address ``src`` (rows ``src_pitch`` bytes apart) to ``dst``."""
    dst: int
    dst_pitch: int
    src: int
    src_pitch: int
    width: int
    height: int


class Transfer(NamedTuple):
    """The copy-engine API's unit: the wait (or None), the copies, the signal (or None), in that order."""
    wait: Optional[Wait]
    copies: tuple
    signal: Optional[Signal]


def lane_type(device):
    """The lane class for ``device``'s backend: the one place that asks."""
    return CudaLane if device.type == "cuda" else HostLane


class Lane(abc.ABC):
    """One queue of copies and flag operations, run in order. Each method returns once its operation is queued,
    except ``drained`` and the joins, which say what they wait for."""

    ENGINES = ""  # what moves the bytes, for CopyEngines.describe
    PINNED = False  # host memory the device reads (the proxy's ring) must be page-locked
    ADDS_BY_KERNEL = False  # ``add`` launches a compiled kernel, which the lane is given at creation (``signal=``)

    @staticmethod
    @abc.abstractmethod
    def capabilities(ctx):
        """What the copy-engine API relies on here, as {name: value}; raises when the device lacks one."""

    @staticmethod
    @abc.abstractmethod
    def bind_thread():
        """A function that, called on another thread, gives it the calling thread's device context."""

    @staticmethod
    @abc.abstractmethod
    def capturing():
        """True while the current stream is being captured into a CUDA graph."""

    @abc.abstractmethod
    def after_current(self):
        """Later work starts after everything queued on the caller's current stream so far."""

    @abc.abstractmethod
    def hold(self):
        """From now on operations are kept, and each ``join_current`` issues them, after the kernel launched in
        between; another ``hold`` drops those kept for a join that never came. A lane whose work runs beside the
        kernel anyway (the host thread) runs them at once."""

    @abc.abstractmethod
    def wait(self, wait, caller):
        """Later work waits until ``wait``'s flag reaches its value."""

    @abc.abstractmethod
    def copy(self, copy):
        """One 2-D copy (``copy.dst`` on any rank's heap)."""

    @abc.abstractmethod
    def write(self, flag, value):
        """Set the one-element int32 ``flag`` (a peer's included) to ``value`` after the earlier copies landed."""

    @abc.abstractmethod
    def add(self, signal):
        """Add to ``signal``'s flag (release) after the earlier copies landed."""

    @abc.abstractmethod
    def transfer(self, transfer, caller, capturing=False):
        """After the work queued on the caller's current stream: ``transfer``'s wait, copies and signal
        (``capturing``: the current stream is being captured, as ``capturing()`` said just before)."""

    @abc.abstractmethod
    def join_current(self, flags, caller):
        """The current stream continues after the lane's work, once every one of ``flags`` (one-element int32 views
        on our heap) is set; it then clears them. Host-blocking on the host thread's lane (the context's timeout)."""

    @abc.abstractmethod
    def join_and_wait(self, flags, caller, *, check):
        """``join_current``, and the host blocks until the current stream gets there, calling ``check()`` between
        polls (it raises to give up)."""

    @abc.abstractmethod
    def drained(self):
        """True once everything queued has run; raises the first failure (once)."""


class CudaLane(Lane):
    """A CUDA stream, made with the context: creating a stream while a kernel of ours spins can block."""

    ENGINES = "CUDA copy engines"
    PINNED = True
    ADDS_BY_KERNEL = True

    def __init__(self, ctx, *, signal=None):
        self.device = ctx.get_device()
        self.index = self.device.index
        self.stream = torch.cuda.Stream(self.device)
        self.handle = self.stream.cuda_stream
        # one event, recorded again by every after_current: torch's wait_stream makes a new event each call
        # (cudaEventCreate, a few us); a re-recorded event orders the same way, since a wait takes the record before it
        self.event = cuda_driver.event_create()
        self.signal = signal  # the context's signal kernel (api.py); None on the fused ops' queue, which adds nothing
        self._held = None  # the operations hold keeps for join_current; None: issued at once

    def __del__(self):
        try:
            cuda_driver.event_destroy(self.event)
        except Exception:  # at interpreter exit the driver may be gone first
            pass

    @staticmethod
    def capabilities(ctx):
        ordinal = ctx.get_device().index
        caps = {name: cuda_driver.device_attribute(attr, ordinal) for name, attr in (
            ("CAN_USE_64_BIT_STREAM_MEM_OPS", cuda_driver.CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS),
            ("CAN_FLUSH_REMOTE_WRITES", cuda_driver.CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES),
            ("ASYNC_ENGINE_COUNT", cuda_driver.CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT))}
        if not caps["CAN_USE_64_BIT_STREAM_MEM_OPS"]:
            raise RuntimeError(f"iris.iris: the copy engine needs CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS on "
                               f"GPU {ordinal} (int64 wait flags), which reads "
                               f"{caps['CAN_USE_64_BIT_STREAM_MEM_OPS']}; "
                               "use engines=() on this driver")
        for index in sorted(set(ctx.peer_devices) - {ordinal}):
            if not torch.cuda.can_device_access_peer(ordinal, index):
                raise RuntimeError(f"iris.iris: the copy engine needs peer access from GPU {ordinal} to GPU {index}, "
                                   "which the driver refuses; use engines=() (the SMs then carry the traffic)")
        return caps

    @staticmethod
    def bind_thread():
        # a thread's driver calls use its current context: set through the driver, which waits for nothing
        # (torch.cuda.set_device may initialise runtime state first)
        context = cuda_driver.current_context()
        return lambda: cuda_driver.set_current_context(context)

    @staticmethod
    def capturing():
        return torch.cuda.is_current_stream_capturing()

    def _issue(self, operation):
        if self._held is None:
            operation()
        else:
            self._held.append(operation)

    def after_current(self):
        cuda_driver.order_after(self.handle, self.event, private.current_stream(self.index))

    def hold(self):
        # A stream wait issued before the kernel can stand in the kernel's hardware queue ahead of it (streams share
        # the GPU's few, CUDA_DEVICE_MAX_CONNECTIONS), waiting for a count only the kernel can raise.
        self._held = []

    def wait(self, wait, caller):
        stream_wait = cuda_driver.stream_wait_at_least if wait.bits == 32 else cuda_driver.stream_wait_at_least_64
        self._issue(lambda: stream_wait(self.handle, wait.address, wait.value))

    def copy(self, copy):
        self._issue(lambda: cuda_driver.copy_2d(copy.dst, copy.dst_pitch, copy.src, copy.src_pitch, copy.width,
                                                copy.height, self.handle))

    def write(self, flag, value):
        self._issue(lambda: cuda_driver.stream_write(self.handle, flag.data_ptr(), value))

    def add(self, signal):
        self._issue(lambda: self.signal.launch(self.handle, signal))

    def transfer(self, transfer, caller, capturing=False):
        if transfer.signal is not None:
            self.signal.check(transfer.signal.value, caller)  # before anything is queued
        self.after_current()  # the caller's queued work may write the source
        if transfer.wait is not None:
            self.wait(transfer.wait, caller)
        copies, handle = transfer.copies, self.handle
        if self._held is not None:  # kept for a join, one operation at a time
            for copy in copies:
                self._issue(lambda copy=copy: _copy(copy, handle))
        # several copies: one batched driver call where the driver has one and no capture runs (the batched call
        # cannot be captured); one by one, 64 tiles took 768 us of host time on an H200 host
        elif len(copies) == 1 or capturing or not self._batched(copies, handle):
            for copy in copies:
                _copy(copy, handle)
        if transfer.signal is not None:
            self.add(transfer.signal)

    @staticmethod
    def _batched(copies, handle):
        """``copies`` queued in one driver call; False where the driver has none or refused this one (said once:
        the driver's batch is then left alone, and the copies go one by one)."""
        result = cuda_driver.copy_2d_batch(copies, handle)
        if result > 0:
            logger.warning(f"copy engine: the driver's batched copy failed with CUDA error {result}; copies are "
                           "queued one by one from now on")
        return result == 0

    def join_current(self, flags, caller):
        if self._held is not None:
            held, self._held = self._held, []
            for operation in held:
                operation()
        main = torch.cuda.current_stream(self.device)
        main.wait_stream(self.stream)
        for flag in flags:
            cuda_driver.stream_wait_at_least(main.cuda_stream, flag.data_ptr(), 1)
            cuda_driver.stream_write(main.cuda_stream, flag.data_ptr(), 0)

    def join_and_wait(self, flags, caller, *, check):
        self.join_current(flags, caller)
        event = torch.cuda.Event()
        event.record()
        while not event.query():
            check()
            time.sleep(1e-5)

    def drained(self):
        return self.stream.query()


class HostLane(Lane):
    """The cpu backend's stand-in for a copy-engine stream: a thread that runs the queued operations in order, beside
    the interpreted kernels. After a failed operation it skips the rest until the failure is collected (``drained``
    or a join raises it, once)."""

    ENGINES = "host threads standing in for copy engines"

    def __init__(self, ctx, *, signal=None):
        assert signal is None, "HostLane adds with the interpreter's native atomic; it takes no signal kernel"
        self.ctx, self.device = ctx, ctx.get_device()
        self._tasks, self._error, self._pending = queue.Queue(), None, 0
        self._idle = threading.Condition()
        self._thread = None
        # IRIS_SANITIZE=race: the race detector follows this lane's operations as a thread of their own
        sanitizer = getattr(ctx, "sanitizer", None)
        self._race = sanitizer.detector if sanitizer is not None else None
        self._race_lane = self._race.new_lane() if self._race is not None else None

    @staticmethod
    def capabilities(ctx):
        return {"engines": "host threads (cpu backend)"}

    @staticmethod
    def bind_thread():
        return lambda: None  # the cpu backend has no device context

    @staticmethod
    def capturing():
        return False  # the cpu backend has no graphs

    def after_current(self):
        pass  # an interpreted launch returns once its kernel has finished: nothing is left queued to follow

    def hold(self):
        pass  # run at once: a launch returns only once the interpreted kernel has finished, so the work runs beside it

    def wait(self, wait, caller):
        self._put(lambda: self._wait(wait, caller))

    def copy(self, copy):
        self._put(lambda: self._copy(copy))

    def write(self, flag, value):
        self._put(lambda: self._release(flag.data_ptr(), flag.element_size(), lambda: flag.fill_(value)))

    def add(self, signal):
        self._put(lambda: self._signal(signal))

    def transfer(self, transfer, caller, capturing=False):
        self._put(lambda: self._transfer(transfer, caller))

    def join_current(self, flags, caller):
        self._finish()
        for flag in flags:
            with self._polling(flag):
                wait_until(self.ctx, lambda: int(flag.item()), 1, caller=caller)
            flag.fill_(0)

    def join_and_wait(self, flags, caller, *, check):
        self._finish()
        for flag in flags:
            with self._polling(flag):
                while int(flag.item()) < 1:
                    check()
                    time.sleep(1e-4)
            flag.zero_()

    def drained(self):
        with self._idle:
            if self._pending:
                return False
        if self._race is not None:
            self._race.lane_drained(self._race_lane)
        self._collect()
        return True

    # ------------------------------------------------------------------ the operations, on the thread
    def _transfer(self, transfer, caller):
        if transfer.wait is not None:
            self._wait(transfer.wait, caller)
        for copy in transfer.copies:
            self._copy(copy)
        if transfer.signal is not None:
            self._signal(transfer.signal)

    def _wait(self, wait, caller):
        flag = _raw(wait.address, wait.bits // 8, self.device).view(torch.int32 if wait.bits == 32 else torch.int64)
        with self._polling(flag):
            wait_until(self.ctx, lambda: int(flag.item()), wait.value, caller=caller)

    def _copy(self, copy):
        out = _raw(copy.dst, (copy.height - 1) * copy.dst_pitch + copy.width, self.device)
        inp = _raw(copy.src, (copy.height - 1) * copy.src_pitch + copy.width, self.device)
        out = out.as_strided((copy.height, copy.width), (copy.dst_pitch, 1))
        inp = inp.as_strided((copy.height, copy.width), (copy.src_pitch, 1))
        if self._race is not None:  # the lane's thread is not the one torch's dispatch mode hears
            from iris.interpreter.race.host import byte_addresses

            self._race.host_bytes(byte_addresses(inp), write=False)
            self._race.host_bytes(byte_addresses(out), write=True)
        out.copy_(inp)

    # ------------------------------------------------------------------ flags, as the race detector sees them
    def _signal(self, signal):
        """``*signal.address += signal.value``: a release at sys scope, as a copy engine's semaphore release."""
        self._release(signal.address, signal.bits // 8, lambda: _atomic_add(signal))

    def _release(self, address, nbytes, perform):
        if self._race is None:
            return perform()
        return self._race.atomic_word(address, nbytes, write=True, sem="release", perform=perform)

    def _polling(self, flag):
        """Around plain polls of ``flag`` until it reaches a value: the wait that ends is an acquire."""
        if self._race is None:
            return contextlib.nullcontext()
        return self._race.polling(flag.data_ptr(), flag.element_size())

    # ------------------------------------------------------------------ the thread
    def _put(self, operation):
        if self._race is not None:  # the operation runs after what the host did before queuing it
            operation = functools.partial(self._as_lane, self._race.lane_enqueue(), operation)
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="iris-copy-queue", daemon=True)
            self._thread.start()
        with self._idle:
            self._pending += 1
        self._tasks.put(operation)

    def _run(self):
        while True:
            operation = self._tasks.get()
            try:
                if self._error is None:
                    operation()
            except BaseException as e:  # handed to the caller's thread by drained / the joins
                self._error = e
            with self._idle:
                self._pending -= 1
                self._idle.notify_all()

    def _as_lane(self, queued, operation):
        with self._race.on_lane(self._race_lane, queued):
            operation()

    def _collect(self):
        error, self._error = self._error, None
        if error is not None:
            self.ctx.groups.reraise(error)

    def _finish(self):
        """Block until everything queued has run (each wait in it is bounded by the context's timeout), then raise
        the first failure."""
        with self._idle:
            self._idle.wait_for(lambda: self._pending == 0)
        if self._race is not None:
            self._race.lane_drained(self._race_lane)
        self._collect()


def _copy(copy, handle):
    """One ``Copy`` queued on the stream ``handle``: one row as ``Tensor.copy_``'s call (so the driver picks the same
    engine), more as one 2-D copy."""
    if copy.height == 1:
        cuda_driver.copy_1d(copy.dst, copy.src, copy.width, handle)
    else:
        cuda_driver.copy_2d(copy.dst, copy.dst_pitch, copy.src, copy.src_pitch, copy.width, copy.height, handle)


def wait_until(ctx, read, value, *, caller):
    """The cpu backend's wait on a flag: poll ``read()`` until it reaches ``value``, giving up with the context's
    timeout, or at once when a peer has failed (the watchdog then poisons the flags peers raise, so the wait ends
    there too)."""
    timeout_s = DEFAULT_TIMEOUT_S if ctx.timeout_s is None else ctx.timeout_s
    deadline = time.monotonic() + timeout_s
    while (seen := read()) - value < 0:
        ctx.groups.check(caller)
        if time.monotonic() > deadline:
            raise RankTimeoutError(f"{caller}: waited {timeout_s:g} s for a flag to reach {value}; it reads "
                                   f"{seen} (raise the limit with IRIS_TIMEOUT_S)", [])
        time.sleep(1e-4)


def _raw(address, nbytes, device):
    """A uint8 tensor over ``nbytes`` at ``address`` (our heap or a mapped peer's)."""
    storage = private.construct_storage(address, device, max(nbytes, 1))
    return torch.empty(0, dtype=torch.uint8, device=device).set_(storage, 0, (nbytes,), (1,))


def _atomic_add(signal):
    """A real atomic add on shared memory (the Triton interpreter's native one, atomic across processes)."""
    import numpy as np
    from triton._C.libtriton import interpreter as native

    kind = np.int32 if signal.bits == 32 else np.int64
    native.atomic_rmw(native.RMW_OP.ADD, np.array([signal.address], np.uint64),
                      np.array([signal.value], kind).astype(kind), np.array([True]), native.MEM_SEMANTIC.RELEASE)
