"""The happens-before race detector of the cpu backend (``IRIS_SANITIZE=race``): one per rank process.

It sees every access to symmetric memory (kernels' loads, stores and atomics through the interpreter's builder,
``kernels.py``; the host's torch reads and writes of heap tensors, ``host.py``), keeps the clocks of this rank's
threads (``clocks.py``) and checks each access against the shadow of the bytes it touches (``shadow.py``): a
conflicting earlier access (one of the two a write, not both atomic) that does not happen before it is a data
race. Reported once per pair of sites, as it happens, on the rank that sees it; ``ctx.close()`` then raises
``iris.RaceError``.
"""

import contextlib
import os
import sys
import threading
import zlib

import numpy as np

from iris.interpreter.race import clocks
from iris.interpreter.race.clocks import SLOTS, Thread, split
from iris.interpreter.race.shadow import HOST_OBJECTS, POOL_ENTRIES, Shared

_PACKAGE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # .../iris
_HIDDEN = (_PACKAGE + os.sep, os.path.dirname(os.path.abspath(np.__file__)) + os.sep)
KINDS = {(False, False): "read", (True, False): "write", (False, True): "atomic read", (True, True): "atomic write"}


def _hidden_prefixes():
    """Where a report's line is not looked for: iris, numpy, Triton, torch, and the files or folders that
    ``IRIS_RACE_HIDE`` lists (``os.pathsep``-separated: a wrapper every call of a program passes through)."""
    import torch
    import triton

    extra = tuple(os.path.abspath(p) for p in os.environ.get("IRIS_RACE_HIDE", "").split(os.pathsep) if p)
    return _HIDDEN + tuple(os.path.dirname(os.path.abspath(m.__file__)) + os.sep for m in (triton, torch)) + extra


class Detector:
    """This rank's view: its threads (the host, the programs of the kernel running now, the copy lane), the shared
    shadow and the reports. ``describe(heap_rank, offset)`` names the allocation holding a byte (the context's
    heap knows). The thread an access belongs to is the one the calling Python thread runs now (``current``):
    kernels and the host on the context's thread, copy-lane operations on the lane's."""

    def __init__(self, rank, world_size, bases, size, exchange, barrier, describe):
        self.rank, self.world_size = rank, world_size
        self.components = world_size * SLOTS
        self.shared = Shared(rank, world_size, bases, size, self.components, exchange, barrier)
        self.host = Thread(rank * SLOTS, rank, self.components)
        self._local = threading.local()
        self._local.thread = self.host
        self.kernel = None  # the kernel's name while one runs
        self.races = []
        self._reported = set()
        self._sites = {}
        self._describe = describe
        self._hidden = _hidden_prefixes()

    @property
    def paused(self):
        """Whether the calling Python thread is polling a flag (``polling``): its plain reads are not accesses."""
        return getattr(self._local, "paused", False)

    @property
    def current(self):
        """The detector's thread of the calling Python thread, or None (a thread it does not follow)."""
        return getattr(self._local, "thread", None)

    # ------------------------------------------------------------------ kernels
    def begin_kernel(self, name):
        self.kernel = name
        self._joined = Thread(self.host.tid, self.rank, self.components)
        self._joined.C[:] = self.host.C
        self._joined.L[:] = self.host.L
        self._slot_clocks = {}
        self._local.thread = None  # the interpreter's argument copies are not the host's accesses

    def begin_program(self, program):
        self._end_program()
        tid = self.rank * SLOTS + 1 + program % (SLOTS - 2)
        self._local.thread = self.host.fork(tid, program, self._slot_clocks.get(tid, 0))

    def _end_program(self):
        thread = self.current
        if thread is not None and thread is not self.host:
            self._joined.join(thread)
            # the next program in the same slot continues after this one (and so looks ordered after it)
            self._slot_clocks[thread.tid] = thread.C[thread.tid]

    def end_kernel(self):
        self._end_program()
        self.host.join(self._joined)
        self.host.tick()
        self._local.thread = self.host
        self.kernel = None

    def fence(self):
        if self.current is not None:
            self.current.fence()

    # ------------------------------------------------------------------ copy lanes
    def new_lane(self):
        """A copy lane's thread: its operations, queued from the host, run in order on a Python thread of their own.
        Every lane of a rank shares the last slot (two lanes' accesses look ordered to each other)."""
        return Thread(self.rank * SLOTS + SLOTS - 1, self.rank, self.components, program=-2)

    def lane_enqueue(self):
        """On the host, as an operation is queued on a copy lane: the host's clocks, which the operation runs
        after (a copy stream waits for the current stream's work queued before), and the line that queued it (the
        site of the operation's accesses)."""
        self.host.tick()
        return self.host.C.copy(), self.host.L.copy(), self._where(sys._getframe(1))

    @contextlib.contextmanager
    def on_lane(self, lane, queued):
        """Run a lane operation (on the lane's thread) as ``lane``, after what the host did before queuing it."""
        np.maximum(lane.C, queued[0], out=lane.C)
        np.maximum(lane.L, queued[1], out=lane.L)
        lane.F = lane.C.copy()
        lane.tick()
        self._local.thread, self._local.where = lane, queued[2]
        try:
            yield
        finally:
            self._local.thread = self._local.where = None

    def lane_drained(self, lane):
        """On the host, once every queued operation of ``lane`` has run: the host continues after them."""
        self.host.join(lane)
        self.host.tick()

    @contextlib.contextmanager
    def polling(self, address, nbytes):
        """The library polls the flag at ``address`` on this thread with plain reads until it reaches a value: the
        polls are not accesses of their own; the wait that ends is an acquire at sys scope."""
        self._local.paused = True
        try:
            yield
        finally:
            self._local.paused = False
        self.atomic_word(address, nbytes, write=False, sem="acquire")

    def atomic_word(self, address, nbytes, write, sem, perform=None):
        """An atomic access of the word at ``address`` at sys scope by the calling thread (a lane's signal, a
        polled flag): recorded, released and acquired as ``sem`` says."""
        return self.access(np.array([address], np.uint64), nbytes, None, write=write, atomic=True, sem=sem,
                           scope="sys", perform=perform)

    def host_barrier(self, key):
        """A context manager around a host barrier: each member releases its host's clock to the barrier's object
        (``key``: the members and the call's parity, so that a member already in the next call cannot release
        into the object this call's last member still acquires from), and acquires everyone's after."""
        return _HostBarrier(self, key)

    # ------------------------------------------------------------------ accesses
    def site(self, kind):
        """The id of the current access's site: the innermost frame outside iris, Triton, torch and numpy (the
        user's kernel line, or the line that called the library; for a copy lane, the line that queued the
        operation), with the program and kernel."""
        where = getattr(self._local, "where", None) or self._where(sys._getframe(1))
        thread = self.current
        key = (where, kind, thread.program, self.kernel)
        site = self._sites.get(key)
        if site is None:
            who = (f"program {thread.program} of {self.kernel}" if thread.program >= 0 else
                   "the host" if thread.program == -1 else "a copy lane")
            site = self._sites[key] = self.shared.add_site(f"{kind} by rank {self.rank}, {who}, at {where}")
        return site

    def _where(self, frame):
        """``file:line`` of the innermost frame from ``frame`` out that is outside iris, Triton, torch and numpy."""
        while frame is not None and frame.f_code.co_filename.startswith(self._hidden):
            frame = frame.f_back
        return f"{os.path.relpath(frame.f_code.co_filename)}:{frame.f_lineno}" if frame is not None else "?"

    def access(self, addresses, nbytes, mask, write, atomic, sem=None, scope=None, perform=None):
        """Check and record an access of ``nbytes`` bytes at each of ``addresses`` (local addresses, a numpy array)
        where ``mask`` (None: every lane). An atomic (``sem``, ``scope``) is recorded, releases (a write), is
        performed (``perform()``, under the lock: nothing comes between an atomic and its clocks) and acquires.
        Returns ``perform()``'s result."""
        thread = self.current
        addresses = np.asarray(addresses).astype(np.uint64, copy=False)
        if mask is not None:
            addresses = addresses[np.broadcast_to(np.asarray(mask, bool), addresses.shape)]
        addresses = addresses.reshape(-1)
        shared = self.shared
        if thread is None or self.paused or not len(addresses) or not (
                (addresses >= shared.low) & (addresses < shared.high)).any():
            return perform() if perform is not None else None
        site = self.site(KINDS[(write, atomic)])
        relaxed_release = sem not in ("release", "acq_rel")
        relaxed_acquire = sem not in ("acquire", "acq_rel")
        with shared:
            touched = []
            for heap in shared.mapped:
                inside = addresses[(addresses >= np.uint64(heap.base)) & (addresses < np.uint64(heap.base + heap.size))]
                if len(inside):
                    offsets = (inside - np.uint64(heap.base)).astype(np.int64)
                    self._check(heap, (offsets[:, None] + np.arange(nbytes)).reshape(-1), thread, write, atomic, site,
                                nbytes)
                    if atomic:
                        touched.append(shared.sync_objects(heap, offsets))
            if atomic and write:
                self._release(touched, thread, scope, relaxed_release)
            result = perform() if perform is not None else None
            if atomic:
                self._acquire(touched, thread, scope, relaxed_acquire)
        return result

    def host_range(self, start, stop, write, element_bytes=1):
        """The calling thread (the host, or a lane) reads or writes bytes [start, stop) (local addresses) of
        elements of ``element_bytes``."""
        thread = self.current
        if self.paused or thread is None or thread.program >= 0:
            return
        heap = self.shared.heap_of(start)
        if heap is None:
            return
        lo, hi = start - heap.base, min(stop, heap.base + heap.size) - heap.base
        if hi > lo:
            site = self.site("write" if write else "read")
            with self.shared:
                self._check(heap, slice(lo, hi), thread, write, False, site, element_bytes)

    def host_bytes(self, addresses, write, element_bytes=1):
        """The calling thread (the host, or a lane) reads or writes the bytes at ``addresses`` (numpy uint64) of
        elements of ``element_bytes``."""
        thread = self.current
        if self.paused or thread is None or thread.program >= 0:
            return
        for heap in self.shared.mapped:
            inside = addresses[(addresses >= np.uint64(heap.base)) & (addresses < np.uint64(heap.base + heap.size))]
            if len(inside):
                site = self.site("write" if write else "read")
                with self.shared:
                    self._check(heap, (inside - np.uint64(heap.base)).astype(np.int64), thread, write, False, site,
                                element_bytes)

    def _release(self, touched, thread, scope, relaxed):
        shared = self.shared
        for objects in touched:
            for index in np.unique(objects):
                clocks.release(shared.pool_clocks[index], shared.pool_owners[index:index + 1], thread, scope, relaxed)
        if scope != "cta":
            thread.tick()

    def _acquire(self, touched, thread, scope, relaxed):
        shared = self.shared
        for objects in touched:
            for index in np.unique(objects):
                clocks.acquire(shared.pool_clocks[index], shared.pool_owners[index:index + 1], thread, scope, relaxed)

    def _check(self, heap, where, thread, write, atomic, site, element_bytes):
        """Compare an access of bytes ``where`` (an index array or a slice) of ``heap`` with the last write and
        (for a write) the last reads there, report what is unordered, then record it. Under the lock."""
        epoch = thread.epoch(atomic)
        earlier = [(heap.writes[where], heap.write_sites[where], thread.C)]
        if write:  # a write after a read is ordered by the reads' clock (``clocks.py``)
            earlier += [(heap.reads[r][where], heap.read_sites[r][where], thread.L) for r in range(self.world_size)]
        for epochs, sites, known in earlier:
            self._against(heap, where, epochs, sites, known, thread, atomic, site, element_bytes)
        if write:
            heap.writes[where] = epoch
            heap.write_sites[where] = site
            heap.reads[:, where] = 0
        else:
            heap.reads[thread.rank][where] = epoch
            heap.read_sites[thread.rank][where] = site

    def _against(self, heap, where, epochs, sites, known, thread, atomic, site, element_bytes):
        """Report the first of the earlier accesses ``epochs`` (with their ``sites``) that is not ordered before
        ``thread``'s access at ``site`` (``known``: the clock that orders them), once per pair of sites."""
        tid, clock, was_atomic = split(epochs)
        unordered = (epochs != 0) & (tid != thread.tid) & (clock > known[tid])
        if atomic:
            unordered &= ~was_atomic
        if not unordered.any():
            return
        first = int(np.flatnonzero(unordered)[0])
        earlier = int(sites[first])
        if (earlier, site) in self._reported:
            return
        self._reported.add((earlier, site))
        byte = int((np.arange(where.start, where.stop) if isinstance(where, slice) else where)[first])
        where_text = self._describe(heap.rank, byte, element_bytes)
        same_kernel = int(tid[first]) // SLOTS == self.rank and 0 < int(tid[first]) % SLOTS < SLOTS - 1 \
            and thread.program >= 0
        self._report(f"rank {heap.rank}'s heap, {where_text}, {int(unordered.sum())} byte(s) of this access "
                     f"unordered", site, earlier, same_kernel)

    def _report(self, where, site, earlier_site, same_kernel):
        if same_kernel:
            advice = ("the programs of one kernel run in no order: order them with a flag (a release atomic, then an "
                      "acquire wait, at gpu scope or wider), or split the work into kernels")
        else:
            advice = ("nothing orders them: a release/acquire pair at sys scope (iris.atomic_add(flag, 1, ..., "
                      "sem='release', scope='sys') after the access meant to come first, which need not be the one "
                      "that ran first here, and a wait with sem='acquire' before the other), a barrier between them "
                      "(ctx.barrier() on the host, ctx.device_barrier() or ctx.ccl.barrier() on the stream), or a "
                      "kernel boundary on the same rank")
        text = (f"iris: data race (IRIS_SANITIZE=race) on {where}:\n  {self.shared.site_text(site)}\n"
                f"  {self.shared.site_text(earlier_site)} (earlier)\n  {advice}")
        self.races.append(text)
        print(text, file=sys.stderr, flush=True)


class _HostBarrier:
    """Around a host barrier: release the host's clock to the barrier's sync object (the last ``HOST_OBJECTS`` of
    the pool, by the key's checksum: the same entry in every process), and acquire everyone's after."""

    def __init__(self, detector, key):
        self.detector = detector
        self.index = POOL_ENTRIES - 1 - zlib.crc32(repr(key).encode()) % HOST_OBJECTS

    def _clocks(self):
        shared = self.detector.shared
        return shared.pool_clocks[self.index], shared.pool_owners[self.index:self.index + 1]

    def __enter__(self):
        host = self.detector.host
        with self.detector.shared:
            clocks.release(*self._clocks(), host, "sys", relaxed=False)
        host.tick()

    def __exit__(self, *exc):
        if exc[0] is None:
            with self.detector.shared:
                clocks.acquire(*self._clocks(), self.detector.host, "sys", relaxed=False)
