"""Peer-failure detection without debug mode: when a rank raises or dies, its peers fail fast with
``PeerError`` instead of spinning forever in a device wait.

Each context maps a small node-local status page (POSIX shared memory made by rank 0): per rank a slot
``int64[pid, state]``. A daemon thread per context polls it every ``POLL_S``. A peer has failed when it
published FAILED (its ``RankPool`` call raised, or its interpreter is exiting on an uncaught exception) or
when its process is gone without having published CLOSED. On the first failure the thread

1. records it on the group table: from then on every call that talks to peers raises ``PeerError``;
2. logs one line naming both ranks, the peer's pid and how it failed;
3. raises ``PeerError`` in the thread that created the context (``PyThreadState_SetAsyncExc``: delivered at
   that thread's next bytecode, so a thread blocked in ``torch.cuda.synchronize`` gets it once step 4
   lets the kernel finish);
4. poisons this rank's sync flags of the failed peer, and of each peer failing later (``GroupTable.poison``),
   so every device wait for them completes (the data a kernel then reads from them is garbage, but the
   rank is raising anyway).

Across nodes (``iris/host/topology.py``) the page holds this node's ranks only. A rank that sees a failure on its
page, and a rank that fails itself, also report it through the process group's store (``StoreReports``: one
counter and one key per report, the store every node already reaches); every watchdog reads new reports at each
poll, so a failure on another node reaches every rank within a poll or two. A failure on another node poisons
the flags of every rank of ours too: any of them may be waiting in the inter-node stage for the failed rank,
and a rank waiting for such a rank would otherwise wait for ever.

``IRIS_WATCHDOG=0`` starts no thread. The page is made either way: its set-up is collective, so ranks
whose environments differ still make the same calls.
"""

import atexit
import ctypes
import mmap
import os
import secrets
import sys
import threading
import time
import weakref

import numpy as np

from iris.errors import PeerError
from iris.host.distributed import NOTICE_S
from iris.logging import logger
from iris.host.memory.backing import segment_directory

POLL_S = 0.2  # detection latency; each poll reads one /proc/<pid>/stat per peer
WAITS_EVERY = 5  # polls between two reads of this rank's sync flags (one small copy on GPUs): a stuck wait's notice
UNSET, RUNNING, CLOSED, FAILED = 0, 1, 2, 3

_lock = threading.Lock()
_live = weakref.WeakSet()  # watchdogs of this process whose context is open
_announced = set()         # pids of failed peers already raised in this process (two contexts, one failure)
_exit_hook_registered = False





def _raise_in(thread_id, message):
    """Raise ``PeerError(message)`` in another thread. An asynchronous exception can only be a class, so
    the message travels on a subclass made for it (named PeerError, caught by ``except PeerError``)."""
    carrier = type("PeerError", (PeerError,), {"message": message, "__module__": __name__})
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
    size = world_size * 2 * 8
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
        slots = np.frombuffer(mmap.mmap(fd, size), dtype=np.int64).reshape(world_size, 2)  # [rank, (pid, state)]
        slots[rank] = (os.getpid(), RUNNING)
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
        self._failed = set()
        self._waits = {}  # (group ranks, row) -> (behind, count, since when): the device waits seen
        self._polls = 0
        self._stop = threading.Event()
        self._thread = None
        _register_exit_hook()
        with _lock:
            _live.add(self)

    def start(self):
        """Start watching (the end of context creation), unless ``IRIS_WATCHDOG=0``."""
        if os.environ.get("IRIS_WATCHDOG", "1") == "0":
            return
        self._thread = threading.Thread(target=self._run, name=f"iris-watchdog-r{self.rank}", daemon=True)
        self._thread.start()

    def publish(self, state):
        """Set this rank's state; only from RUNNING, so a rank that failed never reads as closed later
        (its context's ``__del__`` runs right after the failure is reported)."""
        slots = self._slots
        if slots is not None and slots[self.rank - self._first, 1] == RUNNING:
            slots[self.rank - self._first, 1] = state
            if state == FAILED:
                self._post(self.rank, os.getpid(), "raised an exception")

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

    def _run(self):
        while not self._stop.wait(POLL_S):
            self._poll()
            self._polls += 1
            if self._polls % WAITS_EVERY == 0 and not self._failed:
                self._notice_waits()

    def _notice_waits(self):
        """One log line, once, for a device wait (a collective's or ``device_barrier``'s) that has not moved for
        ``NOTICE_S``: the call this rank made last, the group, and the ranks that have not arrived."""
        try:
            now, seen = time.monotonic(), self.groups.waits()
        except Exception:  # the context is closing under us
            return
        waits = {}
        for key, (behind, count) in seen.items():
            old = self._waits.get(key)
            since, told = (old[2], old[3]) if old is not None and old[:2] == (behind, count) else (now, False)
            if not told and now - since >= NOTICE_S:
                ranks, row = key
                where = "device_barrier" if row == 0 else f"program {row - 1} of a collective kernel"
                logger.warning(f"{self.groups.last_call} (this rank's last call to its peers): rank {self.rank} has "
                               f"waited {now - since:.0f} s in {where} of the group {list(ranks)} for rank(s) "
                               f"{behind}, which have not arrived; a rank that skipped the call, or made another, "
                               "is the one named (IRIS_DEBUG=1 bounds device waits)",
                               extra={"iris_rank": self.rank, "iris_num_ranks": self.world_size})
                told = True
            waits[key] = (behind, count, since, told)
        self._waits = waits

    def _poll(self):
        slots = self._slots
        if slots is None:
            return
        for peer in self._local_ranks:
            if peer == self.rank or peer in self._failed:
                continue
            pid, state = (int(v) for v in slots[peer - self._first])
            if state == FAILED:
                self._fail(peer, pid, "raised an exception")
            elif state != CLOSED and pid and not _alive(pid):
                how = ("died (its process is gone and never closed its iris context; a kernel that touches a bad address "
                       "kills a rank so: rerun with IRIS_DEBUG=1 to have the address named)")
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

    def _fail(self, peer, pid, how, node=None):
        self._failed.add(peer)
        message = (f"peer rank {peer} (pid {pid}) {how}; rank {self.rank} releases its device waits for rank "
                   f"{peer} and raises iris.PeerError (every later call that talks to peers raises it too)")
        if self.groups.failure is None:  # the first failure; later ones (often caused by it) only poison
            self.groups.failure = message
            with _lock:
                announce = pid not in _announced
                _announced.add(pid)
            if announce:
                logger.error(message, extra={"iris_rank": self.rank, "iris_num_ranks": self.world_size})
                _raise_in(self.owner, message)
        self.groups.poison(peer)
        if node is not None and node != self._node:  # our node's ranks may wait for it in the inter-node stage
            for local_peer in self._local_ranks:
                if local_peer != self.rank and local_peer not in self._failed:
                    self.groups.poison(local_peer)


def mark_failed(error):
    """This process is failing with ``error``: publish FAILED for every open context and stop watching, so
    its peers fail fast and this rank, already failing, gets no PeerError on top. ``RankPool`` calls it
    when a call raises."""
    _finish(_failed_state(error))


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
