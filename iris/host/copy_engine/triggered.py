"""Copy-engine transfers that a kernel releases (upstream Iris's ``iris.triggered``): armed on the copy queue before
the kernel starts, each batch gated on a count the kernel publishes, so a producer kernel hands finished regions
to the copy engines without spending an SM on moving them.

It is the fused ops' mechanism (``schedule.CopySchedule`` on the context's copy queue), made public:

    plan = TriggeredPlan(ctx, buffer, schedules)   # collective: schedules[r] = rank r's batches of buffer (bytes)
    view = plan.begin_device_epoch()               # arm: per own batch, wait for its count, copy it to every
    kernel[grid](..., view)                        #      peer, raise its arrival flag there
        # in the kernel: iris.triggered.publish(view, b) once per contributor, when batch b is written
        #                iris.triggered.wait(view, b) before reading a peer's batch b
    plan.end_device_epoch()                        # the host waits (with the timeout) for every peer batch to
                                                   # arrive, then clears the flags
    plan.next_epoch()                              # collective: the next epoch may write peers' buffers again

    rank q, batch b of owner r:   kernel on r publishes b  ->  side stream on r: wait count[b] >= contributors,
                                  copy segments -> q's buffer, set arrivals[b] = 1 on q  ->  q's kernel / stream sees it

Flags follow the copy queue's rule: set to 1 and cleared after use, never stamped (a replayed CUDA graph repeats
the values it was captured with). One epoch at a time per context, not overlapping a fused op (they share the
queue). On GPUs the armed waits are issued right after the launch, not before it: a stream wait queued before the
producer can sit in the producer's hardware queue ahead of it (``iris/host/copy_engine/queue.py``).
"""

import dataclasses
import enum
import time

import torch

from iris.host.memory.peers import peer_view
from iris.errors import RankTimeoutError
from iris.host.distributed import all_gather_object
from iris.host.groups import POISON
from iris.host.copy_engine.schedule import CopySchedule

VIEW_WORDS = 6  # [rank, world_size, num_batches, counts address, arrivals address, epoch]


class State(enum.Enum):
    ARMED = "armed"
    ACTIVE = "active"
    COMPLETE = "complete"
    FAILED = "failed"
    ABORTED = "aborted"
    DESTROYED = "destroyed"


@dataclasses.dataclass(frozen=True)
class Segment:
    """``height`` rows of ``width`` bytes from byte ``offset`` of the buffer, rows ``pitch`` bytes apart (0: packed)."""
    offset: int
    width: int
    height: int = 1
    pitch: int = 0

    @property
    def row_pitch(self):
        return self.pitch or self.width

    @property
    def end(self):
        return self.offset + (self.height - 1) * self.row_pitch + self.width


@dataclasses.dataclass(frozen=True)
class Batch:
    """Segments that leave together once ``contributors`` publishes have been counted."""
    segments: tuple
    contributors: int = 1


def _span(view, base):
    start = view.data_ptr() - (view.data_ptr() if base is None else base.data_ptr())
    if not view.is_contiguous():
        raise ValueError("iris.triggered: the view must be contiguous; cut batches with Segment(offset, width, height, "
                         "pitch) for strided regions")
    return start, view.numel() * view.element_size()


def whole(view, base=None, contributors=1):
    """One batch: all of ``view`` (byte offsets from ``base``, default ``view`` itself)."""
    start, nbytes = _span(view, base)
    return [Batch((Segment(start, nbytes),), contributors)]


def chunks(view, num_chunks, base=None, contributors=1):
    """``num_chunks`` batches splitting ``view`` along dim 0 (the last may be shorter)."""
    start, nbytes = _span(view, base)
    rows = view.shape[0]
    if not 1 <= num_chunks <= rows:
        raise ValueError(f"iris.triggered.chunks: num_chunks={num_chunks} must be in [1, {rows}] (rows of the view)")
    row_bytes = nbytes // rows
    per = -(-rows // num_chunks)
    return [Batch((Segment(start + r * row_bytes, min(per, rows - r) * row_bytes),), contributors)
            for r in range(0, rows, per)]


class TriggeredPlan:
    """Collective. Transfers of ``buffer`` (a contiguous heap tensor) that kernels release: ``schedules[r]`` lists
    rank r's batches (``Batch`` of byte ``Segment``s), which go to every other rank's ``buffer`` at the same
    offsets. Every rank passes the same schedules. ``timeout`` bounds ``end_device_epoch``."""

    def __init__(self, ctx, buffer, schedules, timeout=30.0):
        caller = "TriggeredPlan"
        ctx.check_symmetric(buffer, caller, "buffer")
        if not buffer.is_contiguous():
            raise ValueError(f"{caller}: buffer must be contiguous (segments are byte ranges of it)")
        schedules = [list(s) for s in schedules]
        if len(schedules) != ctx.num_ranks:
            raise ValueError(f"{caller}: needs one schedule per rank, got {len(schedules)} for {ctx.num_ranks} ranks")
        nbytes = buffer.numel() * buffer.element_size()
        for r, schedule in enumerate(schedules):
            for i, batch in enumerate(schedule):
                if batch.contributors < 1 or not batch.segments:
                    raise ValueError(f"{caller}: rank {r} batch {i} needs segments and contributors >= 1")
                for s in batch.segments:
                    if s.offset < 0 or s.width <= 0 or s.height <= 0 or s.row_pitch < s.width or s.end > nbytes:
                        raise ValueError(f"{caller}: rank {r} batch {i} segment {s} lies outside the buffer's "
                                         f"{nbytes} bytes (or has a pitch below its width)")
        total = sum(len(s) for s in schedules)
        self.counts = ctx.zeros(max(total, 1), dtype=torch.int32)  # own batches: the kernel's publishes
        self.arrivals = ctx.zeros(max(total, 1), dtype=torch.int32)  # peers' batches: set to 1 by their queue
        # the copies write each peer's buffer and arrivals at our offsets: the ranks must agree on them too
        base = ctx.heap.bases[ctx.cur_rank]
        offsets = tuple(t.data_ptr() - base for t in (buffer, self.counts, self.arrivals))
        digests = all_gather_object((repr(schedules), offsets))
        if len({d[0] for d in digests}) != 1:
            raise ValueError(f"{caller}: the ranks passed different schedules; every rank must pass the same list")
        if len({d[1] for d in digests}) != 1:
            at = "; ".join(f"rank {r}: buffer {d[1][0]}, its flags {d[1][1]} and {d[1][2]}" for r, d in enumerate(digests))
            raise ValueError(f"{caller}: the ranks' buffers lie at different heap offsets ({at}), so the copies would "
                             "land elsewhere than the peers' buffers; allocate symmetric tensors in the same order "
                             "and sizes on every rank")
        self.ctx, self.buffer, self.schedules, self.timeout = ctx, buffer, schedules, timeout
        self.first = [sum(len(s) for s in schedules[:r]) for r in range(ctx.num_ranks)]
        self.view = torch.tensor([ctx.cur_rank, ctx.num_ranks, total, self.counts.data_ptr(),
                                  self.arrivals.data_ptr(), 0], dtype=torch.int64, device=ctx.get_device())
        self.sync = ctx.group_sync(None, caller)
        self.epoch, self.state, self._schedule = 0, State.ARMED, None
        ctx.barrier()

    def batch_id(self, rank, index):
        """The number ``publish`` / ``wait`` take for rank ``rank``'s batch ``index``."""
        if not 0 <= index < len(self.schedules[rank]):
            raise ValueError(f"TriggeredPlan.batch_id: rank {rank} has {len(self.schedules[rank])} batches, "
                             f"not {index}")
        return self.first[rank] + index

    def _rows(self, tensor, segment):
        raw = tensor.view(-1).view(torch.uint8)
        return raw.as_strided((segment.height, segment.width), (segment.row_pitch, 1), segment.offset)

    def begin_device_epoch(self):
        """Arm every own batch on the copy queue and return the view for the kernel. Queue nothing on the current
        stream between this and the producer's launch that the armed copies must not wait for."""
        if self.state is not State.ARMED:
            raise RuntimeError(f"TriggeredPlan.begin_device_epoch: the plan is {self.state.value}, not armed; after "
                               "end_device_epoch call next_epoch() (a barrier: no peer writes our buffer again "
                               "before every rank is done with this epoch's data)")
        ctx, rank = self.ctx, self.ctx.cur_rank
        schedule = CopySchedule(ctx, self.sync, "TriggeredPlan")
        peer_buffers = {p: peer_view(ctx, self.buffer, p) for p in schedule.peers}
        peer_arrivals = {p: peer_view(ctx, self.arrivals, p) for p in schedule.peers}
        for i, batch in enumerate(self.schedules[rank]):
            b = self.first[rank] + i
            schedule.after(self.counts[b:b + 1], batch.contributors)
            for p in schedule.peers:
                for segment in batch.segments:
                    schedule.copy(self._rows(peer_buffers[p], segment), self._rows(self.buffer, segment))
                schedule.signal(peer_arrivals[p][b:b + 1])
        self._schedule, self.state = schedule, State.ACTIVE
        ctx.copy_queue.reserved_by = self
        self.epoch += 1
        self.view[5].fill_(self.epoch)
        return self.view

    def end_device_epoch(self, timeout=None):
        """Host-blocking: the current stream waits for every peer batch to arrive and clears the arrival flags, and
        the host waits for that (``timeout``, default the plan's: then FAILED and ``TimeoutError``)."""
        if self.state is not State.ACTIVE:
            raise RuntimeError(f"TriggeredPlan.end_device_epoch: the plan is {self.state.value}, not active; call "
                               "begin_device_epoch first")
        rank = self.ctx.cur_rank
        flags = [self.arrivals[b:b + 1] for r in range(self.ctx.num_ranks) if r != rank
                 for b in range(self.first[r], self.first[r] + len(self.schedules[r]))]
        schedule, self._schedule = self._schedule, None
        self.ctx.copy_queue.reserved_by = None
        try:
            schedule.join()
            self._finish(flags, self.timeout if timeout is None else timeout)
        except BaseException:
            self.state = State.FAILED
            raise
        self.state = State.COMPLETE

    def _finish(self, flags, timeout):
        deadline = time.monotonic() + timeout
        self.ctx.copy_queue.join_and_wait(flags, "TriggeredPlan.end_device_epoch",
                                          check=lambda: self._check(deadline, timeout))

    def _check(self, deadline, timeout):
        self.ctx.groups.check("TriggeredPlan.end_device_epoch")
        if time.monotonic() > deadline:
            raise RankTimeoutError(f"TriggeredPlan.end_device_epoch: peers' batches did not all arrive within "
                                   f"{timeout:g} s (a batch never published, or published fewer times than its "
                                   "contributors?)", [])

    def next_epoch(self):
        """Collective: once every rank is done with this epoch's data, the plan is armed for the next."""
        if self.state is not State.COMPLETE:
            raise RuntimeError(f"TriggeredPlan.next_epoch: the plan is {self.state.value}, not complete")
        self.ctx.barrier()
        self.state = State.ARMED

    def run(self, timeout=None):
        """One epoch with no producer kernel: every own batch is published from the host."""
        self.begin_device_epoch()
        for i, batch in enumerate(self.schedules[self.ctx.cur_rank]):
            b = self.first[self.ctx.cur_rank] + i
            self.counts[b:b + 1].fill_(batch.contributors)
        self.end_device_epoch(timeout)

    def abort(self, timeout=None):
        """End an active epoch without its producer: the armed waits are released (counts past every target) so
        that the queue drains; nothing is guaranteed to have landed."""
        if self.state is State.ACTIVE:
            self.counts.fill_(POISON)
            schedule, self._schedule = self._schedule, None
            self.ctx.copy_queue.reserved_by = None
            schedule.join()
            self.counts.zero_()
        self.state = State.ABORTED

    def destroy(self):
        if self.state in (State.ACTIVE, State.FAILED):
            raise RuntimeError(f"TriggeredPlan.destroy: the plan is {self.state.value}; complete or abort it first")
        self.state = State.DESTROYED
