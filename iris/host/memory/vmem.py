"""A heap that grows (``allocator_type="vmem"``): address ranges reserved once, physical chunks mapped as needed.

Every rank reserves ``world_size`` ranges of ``reserve_bytes`` in its own address space, one per rank, so
``bases[r]`` never changes and kernels keep the heap_bases they were given. Growing is collective: every rank
makes a chunk of the same size, maps it at the end of its own range, exports it as a file descriptor, passes the
descriptors to every other rank over Unix sockets (``SCM_RIGHTS``: the node's ranks only; a descriptor never
leaves the machine) and maps each peer's chunk at the end of that peer's range.

- GPUs: ``cuMemAddressReserve`` / ``cuMemCreate`` / ``cuMemMap`` / ``cuMemSetAccess``, descriptors from
  ``cuMemExportToShareableHandle`` (POSIX file descriptor handles), ``iris/platform/cuda_driver.py``.
- cpu backend: ``mmap(PROT_NONE, MAP_NORESERVE)`` reserves, chunks are ``memfd_create`` files mapped with
  ``MAP_FIXED | MAP_SHARED``; the same exchange and the same growth logic run in CI.
"""

import ctypes
import os
import secrets
import socket

import torch

from iris.platform import cuda_driver

DEFAULT_RESERVE = {"cuda": 256 << 30, "cpu": 16 << 30}  # address space per rank, nothing backed until mapped

_PROT_NONE, _PROT_RW = 0, 3
_MAP_SHARED, _MAP_PRIVATE, _MAP_FIXED, _MAP_ANONYMOUS, _MAP_NORESERVE = 0x1, 0x2, 0x10, 0x20, 0x4000
_libc = None


def _mmap(address, size, prot, flags, fd):
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.mmap.restype = ctypes.c_void_p
        _libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                               ctypes.c_long)
    got = _libc.mmap(address, size, prot, flags, fd, 0)
    if got in (None, ctypes.c_void_p(-1).value):
        raise OSError(ctypes.get_errno(), f"iris: mmap of {size} bytes failed: {os.strerror(ctypes.get_errno())}")
    return got


class CpuChunks:
    granularity = 1 << 16

    def reserve(self, size):
        return _mmap(None, size, _PROT_NONE, _MAP_PRIVATE | _MAP_ANONYMOUS | _MAP_NORESERVE, -1)

    def create(self, size):
        fd = os.memfd_create("iris-heap", os.MFD_CLOEXEC)
        os.ftruncate(fd, size)
        return fd, fd  # (handle, descriptor to export)

    def map(self, address, size, handle):
        _mmap(address, size, _PROT_RW, _MAP_SHARED | _MAP_FIXED, handle)

    def import_(self, fd):
        return fd

    def release(self, handle):
        os.close(handle)  # the mapping keeps the memory


class CudaChunks:
    def __init__(self, device):
        self.device = device
        torch.cuda.set_device(device)
        torch.cuda.init()
        torch.empty(1, device=device)  # the primary context is current on this thread from here on
        self.granularity = cuda_driver.vmm_granularity(device.index)

    def reserve(self, size):
        return cuda_driver.vmm_reserve(size, self.granularity)

    def create(self, size):
        handle = cuda_driver.vmm_create(size, self.device.index)
        return handle, cuda_driver.vmm_export(handle)

    def map(self, address, size, handle):
        cuda_driver.vmm_map(address, size, handle, self.device.index)

    def import_(self, fd):
        try:
            return cuda_driver.vmm_import(fd)
        finally:
            os.close(fd)

    def release(self, handle):
        pass  # released by GrowableMemory.close, after unmapping


class FdExchange:
    """All-gather of file descriptors among the ranks of one node over abstract Unix sockets. Each rank listens
    on a socket with a random name; a round sends our descriptor to every peer, then takes one from each. A
    message carries the round number, so a peer already in the next round is kept for then."""

    def __init__(self, rank, world_size, exchange):
        self.rank, self.world_size = rank, world_size
        name = f"\0iris-heap-{secrets.token_hex(16)}-{rank}"
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(name)
        self.listener.listen(max(world_size, 8))
        self.names = exchange(name)
        self.round = 0
        self.early = {}  # (round, rank) -> fd

    def all_gather(self, fd):
        self.round += 1
        for peer in range(self.world_size):
            if peer != self.rank:
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                    s.connect(self.names[peer])
                    socket.send_fds(s, [f"{self.round} {self.rank}".encode()], [fd])
        fds = {self.rank: fd}
        while len(fds) < self.world_size:
            key = next((k for k in self.early if k[0] == self.round), None)
            if key is not None:
                fds[key[1]] = self.early.pop(key)
                continue
            conn, _ = self.listener.accept()
            with conn:
                message, received, _, _ = socket.recv_fds(conn, 64, 1)
            round_, peer = map(int, message.decode().split())
            if round_ == self.round:
                fds[peer] = received[0]
            else:
                self.early[(round_, peer)] = received[0]
        return [fds[r] for r in range(self.world_size)]

    def close(self):
        self.listener.close()


class GrowableMemory:
    """``size`` bytes now on every rank, growable to ``reserve_bytes``, at bases fixed for the heap's life."""

    growable = True

    def __init__(self, size, device, rank, world_size, exchange, reserve_bytes=None):
        self.device, self.rank, self.world_size = device, rank, world_size
        self.chunks = CudaChunks(device) if device.type == "cuda" else CpuChunks()
        reserve_bytes = reserve_bytes or int(os.environ.get("IRIS_HEAP_RESERVE", 0)) or DEFAULT_RESERVE[device.type]
        self.reserve_bytes = self.round_size(max(reserve_bytes, size))
        if device.type == "cuda":  # one reservation split in world_size ranges
            start = self.chunks.reserve(self.reserve_bytes * world_size)
            self.bases = [start + r * self.reserve_bytes for r in range(world_size)]
        else:
            self.bases = [self.chunks.reserve(self.reserve_bytes) for _ in range(world_size)]
        self.fds = FdExchange(rank, world_size, exchange)
        self.size = 0
        self.mapped = []  # (address, size, handle) for every chunk mapped here
        self.grow(self.round_size(size))
        storage = torch._C._construct_storage_from_data_pointer(self.bases[rank], device, self.size)
        self.local = torch.empty(0, dtype=torch.uint8, device=device).set_(storage, 0, (self.size,), (1,))

    def round_size(self, n):
        return -(-n // self.chunks.granularity) * self.chunks.granularity

    def grow(self, new_size):
        """Collective over every rank: map bytes [size, new_size) of every rank's heap."""
        if new_size > self.reserve_bytes:
            raise MemoryError(f"iris: the heap cannot grow to {new_size} bytes: its address range holds "
                              f"{self.reserve_bytes}; set IRIS_HEAP_RESERVE to more bytes")
        chunk = new_size - self.size
        handle, fd = self.chunks.create(chunk)
        self.chunks.map(self.bases[self.rank] + self.size, chunk, handle)
        self.mapped.append((self.bases[self.rank] + self.size, chunk, handle))
        fds = self.fds.all_gather(fd)
        for peer, peer_fd in enumerate(fds):
            if peer != self.rank:
                peer_handle = self.chunks.import_(peer_fd)
                self.chunks.map(self.bases[peer] + self.size, chunk, peer_handle)
                self.mapped.append((self.bases[peer] + self.size, chunk, peer_handle))
                self.chunks.release(peer_handle)
        if self.device.type == "cuda":
            os.close(fd)  # peers hold their own copies; the handle keeps the memory
        else:
            self.chunks.release(handle)
        self.size = new_size

    def close(self):
        """Stop mapping peers' chunks (GPUs; on the cpu backend mappings last with the process, as tensors may
        view them). Our own chunks stay mapped while tensors may view them."""
        self.fds.close()
        if self.device.type == "cuda":
            own = self.bases[self.rank]
            for address, size, handle in self.mapped:
                if not own <= address < own + self.reserve_bytes:
                    cuda_driver.vmm_unmap(address, size, handle)
        self.mapped = [m for m in self.mapped if self.bases[self.rank] <= m[0] < self.bases[self.rank]
                       + self.reserve_bytes]
