"""Peer-failure detection without debug mode: when a rank raises or dies, its peers fail fast with
``PeerError`` instead of spinning forever in a device wait.

Each context maps a small node-local status page (POSIX shared memory made by rank 0): per rank a slot
``int64[pid, state, text length, text..., wait record...]`` (the text: the call this rank made when calls disagreed;
the record: its device waits that do not move, ``iris/host/stuck.py``). A daemon thread per context polls it every
``POLL_S``. A peer has failed when it published FAILED (its ``RankPool`` call raised, or its interpreter is exiting
on an uncaught exception) or when its process is gone without having published CLOSED. On the first failure the
thread

1. records it on the group table: from then on every call that talks to peers raises ``PeerError``;
2. logs one line naming both ranks, the peer's pid and how it failed;
3. raises ``PeerError`` in the thread that created the context (``PyThreadState_SetAsyncExc``: delivered at
   that thread's next bytecode, so a thread blocked in ``torch.cuda.synchronize`` gets it once step 4
   lets the kernel finish). A call that raises the failure itself in that thread (``GroupTable.check``, or a
   copy lane's check handed over by ``GroupTable.reraise``) withdraws this copy, so the failure surfaces once;
4. poisons this rank's sync flags of the failed peer, and of each peer failing later (``GroupTable.poison``),
   so every device wait for them completes (the data a kernel then reads from them is garbage, but the
   rank is raising anyway).

Across nodes (``iris/host/topology.py``) the page holds this node's ranks only. A rank that sees a failure on its
page, and a rank that fails itself, also report it through the process group's store (``StoreReports``: one
counter and one key per report, the store every node already reaches); every watchdog reads new reports at each
poll, so a failure on another node reaches every rank within a poll or two. A failure on another node poisons
the flags of every rank of ours too: any of them may be waiting in the inter-node stage for the failed rank,
and a rank waiting for such a rank would otherwise wait for ever.

Calls that disagree (``iris/device/sync.py``: the kernels' barriers record a member whose call differs) are found
at each poll (and on the cpu backend by the call itself, ``GroupTable.check``): this rank puts its own call in its
slot's text, reads the other rank's within ``TELL_S``, and fails with ``MismatchError`` naming both, releasing every
wait for every peer (a rank that made another call may never signal the rows this rank waits on).

Every second the thread also reads where this rank waits on its device (``GroupTable.waits``), and ends a wait that
cannot end:

- a wait for a peer that has left (published CLOSED: closed its context, or its process exited; or RETURNED: the
  function ``RankPool`` ran on it returned with its context open) and has not moved for ``GONE_S`` since: a
  ``PeerError`` naming the peer, how it left and the call this rank waits in, raised as a failure is (above). Host
  barriers ask ``gone`` between their polls and raise the same;
- a wait that reaches a cycle of waits through different calls or groups (``iris/host/stuck.py``): a
  ``MismatchError`` naming two of the calls and their groups, on every rank whose waits reach the cycle, about
  ``STUCK_S`` after the waits stopped moving;
- any other wait that has not moved for ``NOTICE_S``: one log line naming the call, the group and the ranks waited
  for, with advice for the debug setting in force.

``IRIS_WATCHDOG=0`` starts no thread. The page is made either way: its set-up is collective, so ranks
whose environments differ still make the same calls.
"""

import atexit
import ctypes
import itertools
import mmap
import os
import secrets
import sys
import threading
import time
import weakref

import numpy as np
import torch

from iris.device import debug
from iris.errors import MismatchError, PeerError
from iris.host import stuck
from iris.host.groups import AGREEING
from iris.host.distributed import NOTICE_S
from iris.logging import logger
from iris.host.memory.backing import segment_directory

POLL_S = 0.2  # detection latency; each poll reads one /proc/<pid>/stat per peer
WAITS_EVERY = 5  # polls between two reads of this rank's sync flags on GPUs (a small copy): mismatches, a stuck wait
UNSET, RUNNING, CLOSED, FAILED, RETURNED = 0, 1, 2, 3, 4
TEXT_BYTES = 512  # of a slot's text
RECORD_AT = 3 + TEXT_BYTES // 8  # where the slot's wait record starts (after pid, state, text length, text)
SLOT_WORDS = RECORD_AT + stuck.RECORD_WORDS
TELL_S = 2.0  # how long a rank whose call disagreed waits for the other rank to say what it called
# CLOSED and RETURNED are published once the rank's queued kernels have run (``Iris.close``, ``mark_returned``), but
# a process that exits publishes CLOSED with kernels still queued on its GPU: their signals land within this long
# after the state changed, or never.
GONE_S = 1.0
LEFT = {CLOSED: "closed its iris context (ctx.close(), the end of its `with` block, or its exit)",
        RETURNED: "returned from the function the launcher ran on it (its main), its iris context still open"}

_lock = threading.Lock()
_live = weakref.WeakSet()  # watchdogs of this process whose context is open
# failures already raised in this process (two contexts, one failure): the pids of peers that raised or died, and
# (watchdog serial, peer) for peers that left while one context waited for them
_announced = set()
_serials = itertools.count()  # one per watchdog: a peer leaving is an event of one context's
_exit_hook_registered = False





def _raise_in(thread_id, message, kind=PeerError, delivered=None):
    """Raise ``kind(message)`` (a ``PeerError``) in another thread, calling ``delivered()`` when it is raised there.
    An asynchronous exception can only be a class, so the message travels on a subclass made for it (named as
    ``kind``, caught by ``except kind``), which the target thread instantiates as it raises it."""
    def arrive(self, *args):
        if delivered is not None:
            delivered()
        kind.__init__(self, *args)

    carrier = type(kind.__name__, (kind,), {"message": message, "__module__": __name__, "__init__": arrive})
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id), ctypes.py_object(carrier))


def _alive(pid):
    """Whether process ``pid`` (on this node) still runs: /proc/<pid>/stat exists and is not a zombie."""
    if not os.path.isdir("/proc/self"):  # no procfs (macOS): signal 0 tells existence only
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            pass
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")  # "pid (comm) state ..."; comm may hold ")"


def _map_status_page(rank, world_size, exchange, barrier):
    """Rank 0 creates the page (128 random bits in the name, mode 0600), every rank maps it and publishes
    its slot, and rank 0 unlinks it once all have: nothing stays in /dev/shm even if a process dies later."""
    size = world_size * SLOT_WORDS * 8
    fd = path = None
    if rank == 0:
        path = os.path.join(segment_directory(size), f"iris-{secrets.token_hex(16)}-status")
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
    try:
        if fd is not None:
            os.ftruncate(fd, size)
        path = exchange(path)[0]
        if fd is None:
            fd = os.open(path, os.O_RDWR)
        slots = np.frombuffer(mmap.mmap(fd, size), dtype=np.int64).reshape(world_size, SLOT_WORDS)
        slots[rank, :2] = (os.getpid(), RUNNING)
        barrier()
    finally:
        if fd is not None:
            os.close(fd)
        if rank == 0:
            os.unlink(path)
    return slots


class StoreReports:
    """Failure reports through a store, for the ranks of other nodes: ``post`` appends one, ``new`` returns those
    not yet read. Keys live under ``prefix`` (one per context), a few bytes each."""

    def __init__(self, store, prefix):
        self.store, self.prefix, self.read = store, prefix, 0

    def post(self, peer, pid, how, node):
        index = self.store.add(f"{self.prefix}/count", 1) - 1
        self.store.set(f"{self.prefix}/{index}", f"{peer} {pid} {node} {how}")

    def new(self):
        count = self.store.add(f"{self.prefix}/count", 0)
        found = []
        while self.read < count:
            key = f"{self.prefix}/{self.read}"
            if not self.store.check([key]):  # counted but not yet written: the next poll reads it
                break
            peer, pid, node, how = self.store.get(key).decode().split(" ", 3)
            found.append((int(peer), int(pid), int(node), how))
            self.read += 1
        return found


class Watchdog:
    """This rank's slot on the status page and the thread that watches the others' (module docstring).
    Holds no reference to the context, so a context dropped without ``close`` is still collected (and
    its ``__del__`` closes the watchdog)."""

    def __init__(self, rank, world_size, exchange, barrier, groups, topology=None, reports=None):
        """``exchange`` and ``barrier`` span this node's ranks (``topology``: the world's layout, None for one
        node); ``reports`` (a ``StoreReports``) carries failures between nodes."""
        self.rank = rank
        self.world_size = world_size
        self.groups = groups
        self.owner = threading.get_ident()  # the thread PeerError is raised in
        self._first, local = (0, world_size) if topology is None else (topology.node_ranks()[0],
                                                                       topology.local_world_size)
        self._node = 0 if topology is None else topology.node
        self._local_ranks = list(range(self._first, self._first + local))
        self._reports = reports if topology is not None and topology.num_nodes > 1 else None
        self._slots = _map_status_page(rank - self._first, local, exchange, barrier)
        self._serial = next(_serials)
        self._failed = set()
        self._gone = {}  # peer -> (its state, when first seen): peers that closed or returned, which signal no more
        self._waits = {}  # (group ranks, row) -> (behind, count, since when, told): the device waits seen
        self._polls = 0
        # Held while a failure is recorded and raised in the context's thread, and while that thread withdraws the
        # raise (``_withdraw``): a check that sees the failure recorded then never leaves a queued copy behind.
        self._failing = threading.RLock()
        # between a launcher's calls (RETURNED): a failure found then is recorded, not raised into the context's
        # thread, which is in the launcher's own loop; the next call's check raises it
        self._idle = False
        self._stop = threading.Event()
        self._thread = None
        _register_exit_hook()
        with _lock:
            _live.add(self)
        groups.on_mismatch = self._calls_disagree
        groups.on_raise = self._withdraw

    def start(self):
        """Start watching (the end of context creation), unless ``IRIS_WATCHDOG=0``."""
        if os.environ.get("IRIS_WATCHDOG", "1") == "0":
            return
        self._thread = threading.Thread(target=self._run, name=f"iris-watchdog-r{self.rank}", daemon=True)
        self._thread.start()

    def publish(self, state):
        """Set this rank's state; only from RUNNING (or RETURNED, which a later call ends), so a rank that failed
        never reads as closed later (its context's ``__del__`` runs right after the failure is reported)."""
        slots = self._slots
        if state == RETURNED:
            with self._failing:
                self._idle = True
                self._withdraw()  # a copy queued for the call that just ended: the next call's check raises it
        if slots is not None and slots[self.rank - self._first, 1] in (RUNNING, RETURNED):
            slots[self.rank - self._first, 1] = state
            if state == FAILED:
                self._post(self.rank, os.getpid(), "raised an exception")

    def settle(self):
        """The kernels this rank queued have run (``mark_returned``): a mismatch they recorded is raised here, in the
        call's own thread, rather than later into whatever that thread does next (the launcher's wait for its next
        call, which it would end). A failure the call has already seen raised (and perhaps caught) is not raised
        again."""
        if self.groups.closed:
            return
        if self.groups.failure is None and self.groups.mismatches():
            self._calls_disagree(in_thread=True)
        if self.groups.failure is not None and not self.groups.surfaced:
            # the watchdog thread found it first and its copy has not arrived: raised here, the copy withdrawn
            self.groups.check(self.groups.last_call, entering=False)

    def _surfaced(self):
        """The failure has been raised in this rank's own thread (``GroupTable.surfaced``)."""
        self.groups.surfaced = True

    def resume(self):
        """RETURNED back to RUNNING: this rank's process runs a new call (``mark_running``)."""
        self._idle = False
        slots = self._slots
        if slots is not None and slots[self.rank - self._first, 1] == RETURNED:
            slots[self.rank - self._first, 1] = RUNNING

    def gone(self):
        """``{peer: how it left}`` for the peers of this node that closed their context or returned (host barriers
        raise when one of them has not arrived)."""
        return {peer: LEFT[state] for peer, (state, _) in list(self._gone.items())}

    def stop(self):
        self._stop.set()
        thread = self._thread
        # close() can run in this very thread: the garbage collector may free a context anywhere.
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def close(self):
        """Publish CLOSED, stop the thread and unmap the page (``Iris.close``)."""
        self.publish(CLOSED)
        self.stop()
        with _lock:
            _live.discard(self)
        self._slots = None  # the last reference to the page's buffer: unmapped here
        # The group table's hooks are bound methods of this watchdog, which holds the table: a cycle the collector
        # frees only at a later pass when the context was dropped (its finalizer ran this in the pass that found
        # it), keeping the table's sync flags, and so the whole heap, mapped until then.
        self.groups.on_mismatch = self.groups.on_raise = None

    def _run(self):
        # the mismatch records at every poll where they are host memory (the cpu backend), else with the waits
        records_every = 1 if self.groups.device.type == "cpu" else WAITS_EVERY
        while not self._stop.wait(POLL_S):
            self._poll()
            self._polls += 1
            if self._polls % records_every == 0 and self.groups.failure is None:
                try:
                    found = self.groups.mismatches()
                except Exception:  # the context is closing under us
                    found = None
                if found:
                    self._calls_disagree(in_thread=False)
            if self._polls % WAITS_EVERY == 0 and not self._failed and self.groups.failure is None:
                self._watch_waits()

    def _call(self):
        """What this rank is in: its last call, with its arguments where a launcher described that call."""
        text, call = self.groups.last_text, self.groups.last_call
        return text if text and call and text.startswith(call + "(") else str(call)

    def _watch_waits(self):
        """Read where this rank waits on its device and end the waits that cannot end (module docstring)."""
        slots = self._slots
        try:
            now, seen = time.monotonic(), self.groups.waits()
        except Exception:  # the context is closing under us
            return
        waits = {}
        for key, (behind, count) in seen.items():
            old = self._waits.get(key)
            since, told = (old[2], old[3]) if old is not None and old[:2] == (behind, count) else (now, False)
            waits[key] = (behind, count, since, told)
        self._waits = waits
        if slots is None:
            return
        # first the cycles: a rank of one that failed or left on finding it keeps its record for FRESH_S, so its
        # peers name the calls that disagreed rather than its leaving
        mine = [(ranks, row, behind) for (ranks, row), (behind, _, since, _) in waits.items()
                if now - since >= stuck.STUCK_S]
        stuck.write(slots[self.rank - self._first, RECORD_AT:], self._call(), mine)
        if mine:
            records = {peer: stuck.read(slots[peer - self._first, RECORD_AT:], now) for peer in self._local_ranks}
            records = {peer: record for peer, record in records.items() if record is not None}
            found = stuck.cycle(self.rank, records) if self.rank in records else None
            text = found and stuck.disagreement(self.rank, records, found)
            if text:
                return self._disagree(f"the ranks' calls disagree: {text}. Every rank of a group must make the same "
                                      "calls in the same order, in the same groups; this context refuses further "
                                      "calls", in_thread=False)
        for (ranks, row), (behind, _, since, _) in waits.items():
            for peer in behind:
                state, left = self._gone.get(peer, (None, now))
                if state is not None and now - max(since, left) >= GONE_S:
                    return self._wait_on_gone(peer, state, ranks, row)
        self._notice(now)

    def _notice(self, now):
        """One log line, once, for a device wait (a collective's or ``device_barrier``'s) that has not moved for
        ``NOTICE_S``: the call this rank made last, the group, and the ranks that have not arrived."""
        for key, (behind, count, since, told) in self._waits.items():
            if told or now - since < NOTICE_S:
                continue
            ranks, row = key
            where = _where(row)
            if debug.ENABLED.value:
                advice = (f"debug mode is on: the kernel stops after IRIS_DEBUG_SPIN_LIMIT = {debug.SPIN_LIMIT.value} "
                          "polls of one flag, naming both ranks")
            else:
                advice = (f"IRIS_DEBUG=1 bounds device waits at IRIS_DEBUG_SPIN_LIMIT polls, "
                          f"{debug.SPIN_LIMIT.value} by default")
            logger.warning(f"{self.groups.last_call} (this rank's last call to its peers): rank {self.rank} has "
                           f"waited {now - since:.0f} s in {where} of the group {list(ranks)} for rank(s) "
                           f"{behind}, which have not arrived; a rank that skipped the call, or made another, "
                           f"is the one named ({advice})",
                           extra={"iris_rank": self.rank, "iris_num_ranks": self.world_size})
            self._waits[key] = (behind, count, since, True)

    def _wait_on_gone(self, peer, state, ranks, row):
        """A device wait of this rank waits for ``peer``, which has left (``state``): fail as for a peer failure."""
        slots = self._slots
        pid = 0 if slots is None else int(slots[peer - self._first, 0])
        where = _where(row)
        self._fail(peer, pid, f"{LEFT[state]} while rank {self.rank} waits for it in {self._call()} ({where} of the "
                   f"group {list(ranks)}); it never made that call and can no longer make it: every rank of a group "
                   "must make the same calls before it returns or closes its context", event=(self._serial, peer))

    def tell(self, text):
        """Put ``text`` in this rank's slot, for its node's peers to read (``told``)."""
        slots = self._slots
        if slots is None:
            return
        data = text.encode()[:TEXT_BYTES]
        slot = slots[self.rank - self._first]
        slot[3:].view(np.uint8)[:len(data)] = np.frombuffer(data, dtype=np.uint8)
        slot[2] = len(data)

    def told(self, peer, wait_s):
        """The text ``peer`` put in its slot, waiting up to ``wait_s`` for it; None if none came (or the peer is on
        another node)."""
        slots, deadline = self._slots, time.monotonic() + wait_s
        if slots is None or peer not in self._local_ranks:
            return None
        slot = slots[peer - self._first]
        while not slot[2] and time.monotonic() < deadline:
            time.sleep(0.01)
        return slot[3:].view(np.uint8)[:int(slot[2])].tobytes().decode(errors="replace") or None

    def _withdraw(self):
        """The context's thread raises the failure itself (``GroupTable.check``): withdraw the copy this thread may
        have queued for it (``_raise_in``), which would otherwise surface a second time, later."""
        if threading.get_ident() == self.owner:
            with self._failing:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self.owner), None)

    def _calls_disagree(self, in_thread=True):
        """A barrier recorded a member whose call differs from ours (module docstring): say which calls, on this
        rank, release every wait, and raise ``MismatchError`` here (``in_thread``: the call's own check on the cpu
        backend) or in the context's thread."""
        with self._failing:
            if self.groups.failure is not None:  # found already, by the other path
                return
            found = self.groups.mismatches()
            # the records reach this heap beside the alarm: relaxed writes, seen here after the kernel ran
            ranks, row, other, _ = found[0] if found else (range(self.world_size), 1, None, None)
            ours = self.groups.last_text or self.groups.last_call
            self.tell(ours)
            theirs = (other is not None and self.told(other, TELL_S)) or "another call (its own error names it)"
            where = f"program {row - 1} of a kernel"
            alike = (" (alike in op, dtypes and sizes: so their tensors lie at different heap offsets, the heaps "
                     "having been allocated differently before them)") if theirs == ours else ""
            message = (f"the ranks' calls disagree: rank {self.rank} called {ours}, but rank "
                       f"{'another' if other is None else other} called {theirs}"
                       f"{alike} (found at {where} of the group {list(ranks)}). Every rank of a group must make the "
                       "same calls in the same order, with the same op, dtypes, shapes and root, on tensors at "
                       "the same heap offsets (allocate symmetric tensors in the same order and sizes on every "
                       "rank); this context refuses further calls")
            self._disagree(message, in_thread)

    def _disagree(self, message, in_thread):
        """Fail with ``MismatchError(message)``: record it, log it, release every wait for every peer, and raise it
        here (``in_thread``) or in the context's thread."""
        with self._failing:
            if self.groups.failure is not None:
                return
            self.groups.failure_type = MismatchError
            self.groups.failure = message
            # raised first: on the cpu backend the context's thread, spinning in the interpreter, stops before a
            # released wait lets its kernel go on to the data
            if not in_thread and not self._idle:
                _raise_in(self.owner, f"{self.groups.last_call}: {message}", MismatchError, self._surfaced)
            logger.error(message, extra={"iris_rank": self.rank, "iris_num_ranks": self.world_size})
            for peer in self._local_ranks:
                if peer != self.rank:
                    self.groups.poison(peer)
        if in_thread:
            self._surfaced()
            raise MismatchError(f"{self.groups.last_call}: {message}")

    def _poll(self):
        slots = self._slots
        if slots is None:
            return
        for peer in self._local_ranks:
            if peer == self.rank or peer in self._failed:
                continue
            pid, state = (int(v) for v in slots[peer - self._first, :2])
            if state in LEFT:
                self._gone.setdefault(peer, (state, time.monotonic()))
            else:
                self._gone.pop(peer, None)
            if state == FAILED:
                self._fail(peer, pid, "raised an exception")
            elif state != CLOSED and pid and not _alive(pid):
                how = "died (its process is gone and never closed its iris context; " + _died_advice()
                self._post(peer, pid, how)
                self._fail(peer, pid, how)
        if self._reports is not None:
            for peer, pid, node, how in self._reports.new():
                if peer != self.rank and peer not in self._failed:
                    self._fail(peer, pid, f"on node {node} {how}", node)

    def _post(self, peer, pid, how):
        """Tell the other nodes (one report per failure: the failing rank, or the first of its node to see it die)."""
        if self._reports is not None:
            try:
                self._reports.post(peer, pid, how, self._node)
            except Exception:  # the store's host has gone: the job is ending anyway
                pass

    def _fail(self, peer, pid, how, node=None, event=None):
        """Record ``peer``'s failure, log it and raise it in the context's thread, once per ``event`` in this process
        (default: the peer's process, whose one death every context of this process sees), then release the waits
        for it."""
        self._failed.add(peer)
        message = (f"peer rank {peer} (pid {pid}) {how}; rank {self.rank} releases its device waits for rank "
                   f"{peer} and raises iris.PeerError (every later call that talks to peers raises it too)")
        with self._failing:
            if self.groups.failure is None:  # the first failure; later ones (often caused by it) only poison
                self.groups.failure = message
                with _lock:
                    announce = (event or pid) not in _announced
                    _announced.add(event or pid)
                if announce:
                    logger.error(message, extra={"iris_rank": self.rank, "iris_num_ranks": self.world_size})
                    if not self._idle:
                        _raise_in(self.owner, message, delivered=self._surfaced)
        self.groups.poison(peer)
        if node is not None and node != self._node:  # our node's ranks may wait for it in the inter-node stage
            for local_peer in self._local_ranks:
                if local_peer != self.rank and local_peer not in self._failed:
                    self.groups.poison(local_peer)


def _where(row):
    """Where a wait of ``GroupTable.waits`` is, in words."""
    if row == AGREEING:
        return "the agreement on the flags at the group's first use"
    return "device_barrier" if row == 0 else f"program {row - 1} of a collective kernel"


def _died_advice():
    """What a rank that died most likely did, and what to do, for the debug setting in force."""
    if debug.ENABLED.value:
        return ("a kernel that touches a bad address kills a rank so; debug mode is on and checks every address iris "
                "translates, so look for an access that bypasses iris's device functions: a tl.load / tl.store on "
                "a computed pointer)")
    return "a kernel that touches a bad address kills a rank so: rerun with IRIS_DEBUG=1 to have the address named)"


def mark_returned():
    """The function ``RankPool`` ran here returned: publish RETURNED for every open context of this process (a peer
    waiting for this rank then raises instead of waiting for ever), once the kernels it queued have run (their
    signals landed), and raise here a mismatch they found (``Watchdog.settle``); ``mark_running`` takes it back at
    the next call."""
    with _lock:
        watchdogs = list(_live)
    for watchdog in watchdogs:
        if watchdog.groups.device.type == "cuda":
            torch.cuda.synchronize(watchdog.groups.device)
        watchdog.settle()  # on the cpu backend too, so that its tier takes the path GPUs take
        watchdog.publish(RETURNED)


def mark_running():
    """A new ``RankPool`` call starts: contexts that outlived the last one are running again."""
    with _lock:
        watchdogs = list(_live)
    for watchdog in watchdogs:
        watchdog.resume()


def mark_failed(error):
    """This process is failing with ``error``: publish FAILED for every open context and stop watching, so
    its peers fail fast and this rank, already failing, gets no PeerError on top. ``RankPool`` calls it
    when a call raises. A watchdog may raise a peer's failure in this thread just before it stops (the peer
    failing as this rank does); that copy is absorbed, landed or queued: this rank is failing already."""
    while True:
        try:
            _finish(_failed_state(error))
            break
        except PeerError:  # landed while stopping (stopping again is harmless): finish
            continue
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(threading.get_ident()), None)  # queued, not landed


def _failed_state(error):
    # A PeerError is no new failure: the peer that caused it is on every rank's page already, and publishing
    # FAILED here would let a rank polling both name this rank instead of that peer.
    return None if isinstance(error, PeerError) else FAILED


def _finish(state):
    """Publish ``state`` (None: leave it) for every open context of this process and stop their threads."""
    with _lock:
        watchdogs = list(_live)
    for watchdog in watchdogs:
        if state is not None:
            watchdog.publish(state)
        watchdog.stop()


def _at_exit():
    """Interpreter exit: CLOSED for contexts left open, FAILED when an uncaught exception ends it (Python
    sets ``sys.last_value`` before running exit hooks)."""
    error = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
    _finish(CLOSED if error is None else _failed_state(error))


def _register_exit_hook():
    # Registered with the first context, after torch.distributed's teardown hook, so it runs before that
    # teardown (exit hooks run last-in first-out), which could block on a dead peer.
    global _exit_hook_registered
    with _lock:
        if not _exit_hook_registered:
            atexit.register(_at_exit)
            _exit_hook_registered = True
