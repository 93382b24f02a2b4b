"""The symmetric heap: a bump allocator over one allocation per rank.

Allocation is collective: every rank makes the same calls in the same order, so each allocation lands at
the same offset on every rank, which is what lets a kernel reach a peer's copy by swapping the base.
Nothing is ever freed; a heap lives as long as its context and the tensors carved from it.
"""

import math

import torch

# 256 bytes: a whole number of 128-byte cache lines, and enough for 16-byte vector and TMA accesses.
ALIGNMENT = 256


def _format_bytes(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def align_up(n):
    return -(-n // ALIGNMENT) * ALIGNMENT


class SymmetricHeap:
    """``size`` bytes for user tensors, followed by ``reserved`` bytes the library keeps for itself
    (``memory`` must hold ``align_up(size) + reserved``)."""

    def __init__(self, memory, size, reserved, rank, world_size):
        self.memory = memory
        self.size = size
        self.reserved = memory.local[align_up(size):align_up(size) + reserved]
        self.rank = rank
        self.world_size = world_size
        self.bases = list(memory.bases)
        self.local = memory.local  # uint8, this rank's whole heap
        self.offset = 0

    @property
    def base(self):
        return self.bases[self.rank]

    @property
    def bytes_left(self):
        return self.size - self.offset

    def allocate(self, shape, dtype, caller):
        """A tensor of ``shape`` and ``dtype`` viewing fresh heap bytes (contents undefined)."""
        if not isinstance(dtype, torch.dtype):
            raise TypeError(f"{caller}: dtype must be a torch.dtype, got {dtype!r}")
        if any(d < 0 for d in shape):
            raise ValueError(f"{caller}: negative dimension in size {tuple(shape)}")
        nbytes = math.prod(shape) * dtype.itemsize
        start = align_up(self.offset)
        if start + nbytes > self.size:
            raise MemoryError(
                f"{caller}: symmetric heap exhausted: asked for {nbytes} bytes ({_format_bytes(nbytes)}, "
                f"{tuple(shape)} {dtype}) but only {max(self.size - start, 0)} bytes are left of "
                f"{self.size} ({_format_bytes(self.size)}); pass a larger heap_size to iris.iris()")
        self.offset = start + nbytes
        return self.local[start:start + nbytes].view(dtype).view(shape)

    def contains(self, tensor):
        """True when every byte ``tensor`` can address lies in this rank's heap."""
        if not isinstance(tensor, torch.Tensor) or tensor.device != self.local.device:
            return False
        if tensor.numel() == 0:  # addresses no byte (torch reports data_ptr() 0 for it)
            return True
        start = tensor.data_ptr()
        span = sum((n - 1) * abs(s) for n, s in zip(tensor.shape, tensor.stride())) + 1
        return self.base <= start and start + span * tensor.element_size() <= self.base + self.local.numel()

    def offset_of(self, tensor):
        return tensor.data_ptr() - self.base
