"""The host-driven copy-engine path: copies into peers' heaps, and the flags that order them, queued on a side
stream beside the kernels so that no SM spends time on them.

A fused kernel stores its results locally and counts them on a flag. The side stream waits for the count
(``cuStreamWaitValue32``, a stream memory operation: the stream's front end polls one word), copies the finished
region into each peer's heap (``cuMemcpy2DAsync``: one copy-engine transfer however strided), and writes a flag
on each peer (``cuStreamWriteValue32``, fenced after the copies). The compute stream joins the side stream and
waits for the peers' flags before anything after the op runs.

On the cpu backend a host thread runs the same operations, in order, beside the interpreted kernel. The queue
drives one lane (``lanes.py``): that stream, or that thread.
"""

from iris.host.copy_engine.lanes import Copy, Wait, lane_type


class CopyQueue:
    """One side stream of copies and flag operations per context (made with the context: creating a stream
    while a kernel of ours spins can block). Use in this order: ``fork``, queue ``consume`` / ``copy`` / ``write``,
    launch the kernel whose counts the waits read, then ``join``.

    They are queued before the launch because on the cpu backend a launch returns only once the interpreted
    kernel has finished: a host thread runs them beside it. On GPUs ``join`` issues them, after the launch: streams
    share the GPU's few hardware queues (``CUDA_DEVICE_MAX_CONNECTIONS``), and a stream wait issued before the
    kernel can stand in the kernel's queue ahead of it, waiting for a count only the kernel can raise. The lane
    (``lanes.py``) holds that difference."""

    def __init__(self, ctx):
        self.ctx = ctx
        self.device = ctx.get_device()
        self.lane = lane_type(self.device)(ctx)
        self.lane.hold()  # everything queued waits for join, which issues it after the launch
        self.reserved_by = None  # a TriggeredPlan during its epoch: nothing else may fork meanwhile

    def fork(self):
        if self.reserved_by is not None:
            raise RuntimeError("CopyQueue.fork: the context's copy queue carries an active TriggeredPlan epoch; a fused "
                               "op or another plan cannot share it: call plan.end_device_epoch() (or abort()) first")
        self.lane.after_current()  # after the compute stream's work so far
        self.lane.hold()

    def consume(self, count, value, caller):
        """Later side-stream work waits until the local int32 ``count`` (a one-element heap view a kernel adds to)
        reaches ``value``; the count is then cleared for the next call, as ``join`` clears its flags."""
        self.lane.wait(Wait(count.data_ptr(), 32, value), caller)
        self.lane.write(count, 0)

    def copy(self, dst, src):
        """``dst.copy_(src)`` on a copy engine: 2-D views with contiguous rows, ``dst`` on any rank's heap."""
        if dst.shape != src.shape or dst.dtype != src.dtype or dst.stride(1) != 1 or src.stride(1) != 1:
            raise ValueError(f"CopyQueue.copy: {tuple(src.shape)} {src.dtype} -> {tuple(dst.shape)} {dst.dtype}; "
                             "both must be 2-D views of one shape and dtype with contiguous rows")
        size = dst.element_size()
        self.lane.copy(Copy(dst.data_ptr(), dst.stride(0) * size, src.data_ptr(), src.stride(0) * size,
                            dst.shape[1] * size, dst.shape[0]))

    def write(self, flag, value):
        """Write ``value`` into the int32 ``flag`` (a one-element view, a peer's included) after the side
        stream's earlier copies have landed."""
        self.lane.write(flag, value)

    def join(self, flags, caller):
        """The compute stream continues after the side stream's work, once every one of ``flags`` (one-element
        int32 views on our heap, each set to 1 by a peer's side stream) is set; it then clears them. A flag is
        consumed, not stamped with a call number: a replayed CUDA graph writes the numbers it was captured with,
        so a stamp left by the last replay would satisfy the next one's wait."""
        self.lane.join_current(flags, caller)

    def join_and_wait(self, flags, caller, *, check):
        """``join``, and the host blocks until the compute stream gets there, calling ``check()`` between polls (it
        raises to give up)."""
        self.lane.join_and_wait(flags, caller, check=check)
