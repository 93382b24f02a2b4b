"""The host-driven copy-engine path: copies into peers' heaps, and the flags that order them, queued on a side
stream beside the kernels so that no SM spends time on them.

A fused kernel stores its results locally and counts them on a flag. The side stream waits for the count
(``cuStreamWaitValue32``, a stream memory operation: the stream's front end polls one word), copies the finished
region into each peer's heap (``cuMemcpy2DAsync``: one copy-engine transfer however strided), and writes a flag
on each peer (``cuStreamWriteValue32``, fenced after the copies). The compute stream joins the side stream and
waits for the peers' flags before anything after the op runs.

On the cpu backend a host thread runs the same operations, in order, beside the interpreted kernel.
"""

import queue
import threading
import time
import weakref

import torch

from iris.platform import cuda_driver, private
from iris.errors import RankTimeoutError
from iris.host.distributed import DEFAULT_TIMEOUT_S

_HOST_BASES = weakref.WeakKeyDictionary()  # Iris -> heap bases as Python ints (fixed for a context's life)


def peer_address(ctx, tensor, peer):
    """Address, in this process, of ``tensor``'s symmetric counterpart on rank ``peer``."""
    ctx.check_symmetric(tensor, "peer_address")
    ctx.check_direct(peer, "peer_address", "peer")
    if ctx not in _HOST_BASES:
        _HOST_BASES[ctx] = ctx.get_heap_bases().tolist()
    bases = _HOST_BASES[ctx]
    return tensor.data_ptr() - bases[ctx.get_rank()] + bases[peer]


def peer_view(ctx, tensor, peer):
    """A tensor of ``tensor``'s shape and dtype viewing its counterpart on ``peer`` (writes land there).

    The peer's heap is already mapped into this process (CUDA IPC, or shared memory on the cpu backend), so
    this builds a non-owning storage over the address on our own device, as ``torch._inductor``'s CUDA-graph
    trees rebuild storages from pointers. A contiguous ``view.copy_(src)`` is then one ``cudaMemcpyAsync``,
    which the driver runs on a copy engine over NVLink."""
    if not tensor.is_contiguous():
        raise ValueError("peer_view: tensor must be contiguous; take the view of a contiguous heap tensor")
    address = peer_address(ctx, tensor, peer)
    nbytes = tensor.numel() * tensor.element_size()
    device = ctx.get_device()
    storage = private.construct_storage(address, device, nbytes)
    if storage is not None:
        return torch.empty(0, dtype=tensor.dtype, device=device).set_(storage, 0, tensor.shape, tensor.stride())
    return _view_from_interface(address, tensor, device)


def _view_from_interface(address, tensor, device):
    """Fallback for a torch without the private constructor: the array interfaces torch imports zero-copy."""
    if device.type == "cuda":
        class _Interface:
            __cuda_array_interface__ = {"data": (address, False), "shape": tuple(tensor.shape),
                                        "typestr": _typestr(tensor), "version": 3, "strides": None}

        view = torch.as_tensor(_Interface(), device=device)
    else:
        import ctypes

        import numpy as np

        nbytes = tensor.numel() * tensor.element_size()
        raw = np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(address))
        view = torch.from_numpy(raw).view(tensor.dtype).view(tensor.shape)
    if view.data_ptr() != address:
        raise RuntimeError(f"peer_view: torch copied the peer memory instead of viewing it (on {view.device}); "
                           "this torch cannot wrap a raw device address")
    return view


def _typestr(tensor):
    if tensor.dtype == torch.bfloat16:
        raise TypeError("peer_view: bfloat16 has no array-interface type string; view the buffer as int16")
    kind = "f" if tensor.dtype.is_floating_point else "i"
    return f"<{kind}{tensor.element_size()}"


class CopyQueue:
    """One side stream of copies and flag operations per context (made with the context: creating a stream
    while a kernel of ours spins can block). Use in this order: ``fork``, queue ``consume`` / ``copy`` / ``write``,
    launch the kernel whose counts the waits read, then ``join``.

    They are queued before the launch because on the cpu backend a launch returns only once the interpreted
    kernel has finished: a host thread runs them beside it. On GPUs ``join`` issues them, after the launch: streams
    share the GPU's few hardware queues (``CUDA_DEVICE_MAX_CONNECTIONS``), and a stream wait issued before the
    kernel can stand in the kernel's queue ahead of it, waiting for a count only the kernel can raise."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.device = ctx.get_device()
        self.stream = torch.cuda.Stream(self.device) if self.device.type == "cuda" else None
        self._worker = HostQueue() if self.stream is None else None  # cpu backend: the thread that runs them
        self._pending = []  # GPUs: the operations, issued by join
        self.reserved_by = None  # a TriggeredPlan during its epoch: nothing else may fork meanwhile

    def fork(self):
        if self.reserved_by is not None:
            raise RuntimeError("CopyQueue.fork: the context's copy queue carries an active TriggeredPlan epoch; a fused "
                               "op or another plan cannot share it: call plan.end_device_epoch() (or abort()) first")
        if self.stream is not None:
            self.stream.wait_stream(torch.cuda.current_stream(self.device))  # after the compute stream's work so far
            self._pending = []

    def _queue(self, operation):
        if self.stream is not None:
            self._pending.append(operation)
        else:
            self._worker.put(operation)

    def consume(self, count, value, caller):
        """Later side-stream work waits until the local int32 ``count`` (a one-element heap view a kernel adds to)
        reaches ``value``; the count is then cleared for the next call, as ``join`` clears its flags."""
        if self.stream is not None:
            def operation():
                cuda_driver.stream_wait_at_least(self.stream.cuda_stream, count.data_ptr(), value)
                cuda_driver.stream_write(self.stream.cuda_stream, count.data_ptr(), 0)
        else:
            def operation():
                self._spin(count, value, caller)
                count.fill_(0)
        self._queue(operation)

    def copy(self, dst, src):
        """``dst.copy_(src)`` on a copy engine: 2-D views with contiguous rows, ``dst`` on any rank's heap."""
        if dst.shape != src.shape or dst.dtype != src.dtype or dst.stride(1) != 1 or src.stride(1) != 1:
            raise ValueError(f"CopyQueue.copy: {tuple(src.shape)} {src.dtype} -> {tuple(dst.shape)} {dst.dtype}; "
                             "both must be 2-D views of one shape and dtype with contiguous rows")
        if self.stream is None:
            self._queue(lambda: dst.copy_(src))
            return
        size = dst.element_size()
        self._queue(lambda: cuda_driver.copy_2d(dst.data_ptr(), dst.stride(0) * size, src.data_ptr(),
                                                src.stride(0) * size, dst.shape[1] * size, dst.shape[0],
                                                self.stream.cuda_stream))

    def write(self, flag, value):
        """Write ``value`` into the int32 ``flag`` (a one-element view, a peer's included) after the side
        stream's earlier copies have landed."""
        if self.stream is not None:
            self._queue(lambda: cuda_driver.stream_write(self.stream.cuda_stream, flag.data_ptr(), value))
        else:
            self._queue(lambda: flag.fill_(value))

    def join(self, flags, caller):
        """The compute stream continues after the side stream's work, once every one of ``flags`` (one-element
        int32 views on our heap, each set to 1 by a peer's side stream) is set; it then clears them. A flag is
        consumed, not stamped with a call number: a replayed CUDA graph writes the numbers it was captured with,
        so a stamp left by the last replay would satisfy the next one's wait."""
        if self.stream is None:
            self._worker.finish()
            for flag in flags:
                self._spin(flag, 1, caller)
                flag.fill_(0)
            return
        pending, self._pending = self._pending, []
        for operation in pending:
            operation()
        main = torch.cuda.current_stream(self.device)
        main.wait_stream(self.stream)
        for flag in flags:
            cuda_driver.stream_wait_at_least(main.cuda_stream, flag.data_ptr(), 1)
            cuda_driver.stream_write(main.cuda_stream, flag.data_ptr(), 0)

    def _spin(self, flag, value, caller):
        wait_until(self.ctx, lambda: int(flag.item()), value, caller)


def wait_until(ctx, read, value, caller):
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


class HostQueue:
    """The cpu backend's stand-in for a copy-engine stream: a thread that runs the queued operations in order, beside
    the interpreted kernels. After a failed operation it skips the rest until the failure is collected (``idle`` or
    ``finish`` raises it, once). Serves the fused ops' ``CopyQueue`` and the copy-engine API's queues alike."""

    def __init__(self):
        self._tasks, self._error, self._pending = queue.Queue(), None, 0
        self._idle = threading.Condition()
        self._thread = None

    def put(self, operation):
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
            except BaseException as e:  # handed to the caller's thread by idle / finish
                self._error = e
            with self._idle:
                self._pending -= 1
                self._idle.notify_all()

    def _collect(self):
        error, self._error = self._error, None
        if error is not None:
            raise error

    def idle(self):
        """True once everything queued has run (raising the first failure); False while work remains."""
        with self._idle:
            if self._pending:
                return False
        self._collect()
        return True

    def finish(self):
        """Block until everything queued has run (each wait in it is bounded by the context's timeout), then raise
        the first failure."""
        with self._idle:
            self._idle.wait_for(lambda: self._pending == 0)
        self._collect()
