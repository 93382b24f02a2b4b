"""The race detector's shared state: a shadow of every rank's heap, the sync objects' clocks, the sites of
accesses, and one lock, all in files every rank process maps (as the cpu backend's heaps are).

Per byte of a rank's heap: the epoch of the last write (``writes``) and of the last read by each rank (``reads``),
and the site of each (an index into the writing rank's ``sites``). Per two-byte word, the index of its sync object
(the four clocks of ``clocks.py`` a release leaves there for an acquire), allocated from one pool on first use.
The files are sparse: only the pages of bytes that kernels and the host touch are ever backed, so memory grows
with the heap in use, not with its size.
"""

import fcntl
import mmap
import os
import secrets
import tempfile
import threading

import numpy as np

from iris.interpreter.race.clocks import ROWS

SITE_BYTES = 256
MAX_SITES = 1 << 18
POOL_ENTRIES = 1 << 20  # sync objects (4 clocks each) in a sparse file: only those used take memory
HOST_OBJECTS = 1024  # the pool's last entries: the sync objects of host barriers and exchanges


def _directory():
    override = os.environ.get("IRIS_SHM_DIR")
    if override:
        return override
    return "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()


class _Mapped:
    """A sparse file of ``nbytes`` mapped shared, carved into named numpy arrays."""

    def __init__(self, path, nbytes, create):
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        self.fd = os.open(path, flags, 0o600)
        if create:
            os.ftruncate(self.fd, nbytes)
        self.map = mmap.mmap(self.fd, nbytes)
        self.offset = 0

    def take(self, dtype, shape):
        array = np.ndarray(shape, dtype, buffer=self.map, offset=self.offset)
        self.offset += -(-array.nbytes // 64) * 64
        return array


def _layout(size, world_size):
    """(name, dtype, shape) of a heap's shadow arrays."""
    return [("writes", np.int64, (size,)), ("reads", np.int64, (world_size, size)),
            ("write_sites", np.int32, (size,)), ("read_sites", np.int32, (world_size, size)),
            ("sync", np.int32, ((size + 1) // 2,)), ("sites", np.uint8, (MAX_SITES, SITE_BYTES)),
            ("site_count", np.int64, (1,))]


def _nbytes(layout):
    return sum(-(-np.dtype(d).itemsize * int(np.prod(s)) // 64) * 64 for _, d, s in layout)


class HeapShadow:
    """The shadow of rank ``rank``'s heap, which this process maps at ``base`` (``size`` bytes)."""

    def __init__(self, rank, base, size, mapped, layout):
        self.rank, self.base, self.size = rank, base, size
        for name, dtype, shape in layout:
            setattr(self, name, mapped.take(dtype, shape))
        self._mapped = mapped


class Shared:
    """The heap shadows of this node's ranks, the node's pool of sync objects and its lock, for a context of
    ``world_size`` ranks.
    Collective: ``exchange`` all-gathers a picklable object, ``barrier`` waits for every rank."""

    def __init__(self, rank, world_size, bases, size, components, exchange, barrier):
        self.rank, self.world_size, self.components = rank, world_size, components
        layout = _layout(size, world_size)
        directory = _directory()
        own = os.path.join(directory, f"iris-race-{secrets.token_hex(16)}-r{rank}")
        pool_layout = [("count", np.int64, (1,)), ("owners", np.int32, (POOL_ENTRIES,)),
                       ("clocks", np.int64, (POOL_ENTRIES, ROWS, components))]
        # The heaps this process maps are its node's (another node's base is a negative code, ``iris/host/topology.py``):
        # those are the ones kernels and the host can touch. The node's first rank makes the pool.
        local = [q for q in range(world_size) if bases[q] > 0]
        leader = local[0]
        pool_path = os.path.join(directory, f"iris-race-{secrets.token_hex(16)}-pool") if rank == leader else None
        mine = _Mapped(own, _nbytes(layout), create=True)
        pool = _Mapped(pool_path, _nbytes(pool_layout), create=True) if rank == leader else None
        paths = exchange((own, pool_path))
        try:
            self.heaps = [None] * world_size  # by rank; None for another node's
            for q in local:
                mapped = mine if q == rank else _Mapped(paths[q][0], _nbytes(layout), create=False)
                self.heaps[q] = HeapShadow(q, bases[q], size, mapped, layout)
            self.mapped = [self.heaps[q] for q in local]
            pool = pool or _Mapped(paths[leader][1], _nbytes(pool_layout), create=False)
            self.pool_count, self.pool_owners, self.pool_clocks = (pool.take(d, s) for _, d, s in pool_layout)
            self._pool = pool
            if rank == leader:
                self.pool_owners.fill(-1)  # no rank's gpu-scope releases yet
            barrier()
        finally:
            os.unlink(own)
            if pool_path is not None:
                os.unlink(pool_path)
        self._lock_fd = pool.fd  # every process opened the pool file itself: flock excludes across processes
        self._thread_lock = threading.Lock()
        self.low = np.uint64(min(bases[q] for q in local))
        self.high = np.uint64(max(bases[q] for q in local) + size)

    def __enter__(self):
        try:
            self._thread_lock.acquire()
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
        except BaseException:
            # An exception raised into this thread from outside (the watchdog raises a peer's failure into the
            # context's thread wherever it runs) right after acquire() returned: this thread holds the thread lock
            # (a blocked acquire takes no such exception) and so no other thread of the process holds the file lock;
            # give both back, or every rank would wait on them for good.
            if self._thread_lock.locked():
                try:
                    fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
                finally:
                    self._thread_lock.release()
            raise
        return self

    def __exit__(self, *exc):
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
        finally:
            self._thread_lock.release()

    def heap_of(self, address):
        """The shadow holding byte ``address`` (a local address), or None."""
        for heap in self.mapped:
            if heap.base <= address < heap.base + heap.size:
                return heap
        return None

    def sync_objects(self, heap, offsets):
        """Pool indices of the sync objects of the words at byte ``offsets`` of ``heap``, allocated on first use.
        Under the lock."""
        words = offsets // 2
        index = heap.sync[words]
        fresh = index == 0
        if fresh.any():
            unique, inverse = np.unique(words[fresh], return_inverse=True)
            start = int(self.pool_count[0]) + 1
            if start + len(unique) >= POOL_ENTRIES - HOST_OBJECTS:
                raise RuntimeError(f"iris race detector: more than {POOL_ENTRIES - HOST_OBJECTS} words are used "
                                   "atomically; run a smaller problem under IRIS_SANITIZE=race")
            new = np.arange(start, start + len(unique), dtype=np.int32)
            self.pool_owners[new] = -1
            heap.sync[unique] = new
            self.pool_count[0] = start + len(unique) - 1
            index = index.copy()
            index[fresh] = new[inverse]
        return index

    def add_site(self, text):
        """Store ``text`` in this rank's site table; returns its id (``rank << 24 | index``)."""
        heap = self.heaps[self.rank]
        index = int(heap.site_count[0])
        if index >= MAX_SITES:
            index = MAX_SITES - 1
            text = "(more sites than the detector keeps)"
        else:
            heap.site_count[0] = index + 1
        data = text.encode()[:SITE_BYTES - 1]
        heap.sites[index, :len(data)] = np.frombuffer(data, np.uint8)
        heap.sites[index, len(data)] = 0
        return (self.rank << 24) | index

    def site_text(self, site):
        heap = self.heaps[site >> 24]
        row = bytes(heap.sites[site & 0xFFFFFF])
        return row.split(b"\0", 1)[0].decode(errors="replace")

    def forget(self, heap, start, stop):
        """Bytes [start, stop) of ``heap`` were freed: their next owner starts with no history."""
        heap.writes[start:stop] = 0
        heap.reads[:, start:stop] = 0
