"""Heap memory: one allocation per rank, mapped by every peer.

Each class allocates this rank's heap, exchanges a handle with the other ranks (``exchange`` is an
all-gather of picklable objects over the process group, so handles never leave it), maps every peer's
heap and records where each appears in this process: ``bases[r]``. These two have a fixed ``size``; the
heap that grows is ``iris/host/memory/vmem.py``.
"""

import mmap
import os
import secrets
import tempfile

import torch

from iris.platform import cuda_driver


class _FixedSize:
    growable = False

    @property
    def reserve_bytes(self):
        return self.size

    def round_size(self, n):
        return n

    def grow(self, new_size):
        raise MemoryError(f"iris: this heap has a fixed size of {self.size} bytes; allocator_type='vmem' grows")


class CudaIpcMemory(_FixedSize):
    """Device memory from torch's allocator, shared with peers through CUDA IPC handles."""

    def __init__(self, size, device, rank, exchange):
        self.size, self.device = size, torch.device(device)
        self.local = torch.empty(size, dtype=torch.uint8, device=device)
        ptr = self.local.data_ptr()
        try:
            alloc_base, _ = cuda_driver.allocation_range(ptr)
            handle = cuda_driver.ipc_handle(ptr)
        except RuntimeError as e:
            raise RuntimeError(
                f"iris.iris: cannot share the heap through CUDA IPC ({e}); if PYTORCH_CUDA_ALLOC_CONF sets "
                "expandable_segments:True, unset it for this process") from e
        # torch may place the heap inside a larger driver allocation; peers map the whole allocation.
        entries = exchange((handle, ptr - alloc_base))
        self._opened = []
        self.bases = []
        for peer, (peer_handle, peer_offset) in enumerate(entries):
            if peer == rank:
                self.bases.append(ptr)
                continue
            peer_alloc = cuda_driver.ipc_open(peer_handle)
            self._opened.append(peer_alloc)
            self.bases.append(peer_alloc + peer_offset)

    def close(self):
        for ptr in self._opened:
            cuda_driver.ipc_close(ptr)
        self._opened = []


def segment_directory(total_bytes):
    """/dev/shm when it can hold every rank's heap (containers often give it 64 MiB), else the temp directory:
    a shared file mapping there behaves the same, the page cache backs both."""
    override = os.environ.get("IRIS_SHM_DIR")
    if override:
        return override
    for directory in ("/dev/shm", tempfile.gettempdir()):
        if os.path.isdir(directory):
            stat = os.statvfs(directory)
            if stat.f_bavail * stat.f_frsize >= total_bytes:
                return directory
    raise RuntimeError(f"iris.iris: no directory can hold {total_bytes} bytes of shared heap (tried /dev/shm and "
                       f"{tempfile.gettempdir()}); pass a smaller heap_size or set IRIS_SHM_DIR")


class SharedMemory(_FixedSize):
    """POSIX shared memory for the cpu backend: each rank creates a segment, every rank maps all of them.

    Names carry 128 random bits and segments are created owner-only (0600). Once every rank has mapped
    every segment the names are unlinked, so nothing is left in /dev/shm even if a process dies later;
    the mappings live until the last one is closed.
    """

    def __init__(self, size, rank, world_size, exchange, barrier):
        self.size, self.device = size, torch.device("cpu")
        path = os.path.join(segment_directory(size * world_size), f"iris-{secrets.token_hex(16)}-r{rank}")
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        try:
            os.ftruncate(fd, size)
            paths = exchange(path)
            self.paths = paths  # the node's segments, by local rank (the tests compare them with /proc/self/maps)
            self._maps = []
            for peer_path in paths:
                if peer_path == path:
                    self._maps.append(mmap.mmap(fd, size))
                    continue
                peer_fd = os.open(peer_path, os.O_RDWR)
                try:
                    self._maps.append(mmap.mmap(peer_fd, size))
                finally:
                    os.close(peer_fd)
            barrier()
        finally:
            os.close(fd)
            os.unlink(path)
        self.tensors = [torch.frombuffer(m, dtype=torch.uint8) for m in self._maps]
        self.local = self.tensors[rank]
        self.bases = [t.data_ptr() for t in self.tensors]

    def close(self):
        # The mappings stay valid while any tensor still views them; mmap.close() would fail with
        # exported buffers, so drop our references and let the last tensor unmap.
        self.tensors = []
        self._maps = []
