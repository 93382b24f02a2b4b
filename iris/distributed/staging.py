"""Staging: ordinary tensors through heap buffers that the torch integrations own.

Peers can only reach memory on the symmetric heap, so a collective on an ordinary tensor copies it into a
heap buffer first (or out of one after). Each context has one staging buffer, ``staging_bytes`` long,
allocated once on every rank (collectively, so it sits at the same offset everywhere) when the context is
bound (``staging_for``). A message longer than the buffer moves in chunks that fill it. One buffer per
context, not per group, is safe: every collective begins with a barrier over its group, so a peer touches
our buffer only once our stream has reached that collective, after our copies of the previous one; and it
never grows, because the heap cannot free (a grown buffer would leak the old one) and growing inside a
subgroup's call would allocate on its members only and put the heaps out of step.

Each collective copies one side only where the kernel allows the other side anywhere: all_reduce up to
``CollectiveConfig.one_shot_max_bytes`` stages its input and writes the caller's tensor directly,
reduce_scatter and reduce stage their input, all_gather and all_to_all their output. The two-shot all_reduce
(above 1 MiB), the uneven all_to_all and the equal one past one chunk copy both ways.
"""

import os

import torch

from iris.platform import cuda_driver, private

ALIGN = 256
# Per context: on GPUs 64 MiB (the copy of a full chunk, 2 x 64 MiB through HBM at ~4 TB/s, takes ~33 us, a
# few percent of moving 64 MiB over NVLink at ~370 GB/s); on the cpu backend 1 MiB, since its heaps are small.
DEFAULT_STAGING_BYTES = {"cuda": 64 << 20, "cpu": 1 << 20}

# A context's Staging is kept in ``ctx.integrations["staging"]``, so it goes with the context. Not a
# WeakKeyDictionary here: its value refers to its key (Staging.ctx), which would keep a dropped context and its whole
# heap alive for the life of the process.


class Staging:
    """The heap buffers of one context: ``buffer`` (uint8) and two int64 words for small exchanges."""

    def __init__(self, ctx, nbytes):
        self.ctx = ctx
        self.nbytes = nbytes
        self.buffer = ctx.empty(nbytes, dtype=torch.uint8)
        self.words = ctx.zeros(2, dtype=torch.int64)

    def elements(self, dtype):
        """How many elements of ``dtype`` the buffer holds."""
        return self.nbytes // dtype.itemsize

    def view(self, dtype, numel, start=0):
        """A flat ``dtype`` view of ``numel`` elements of the buffer from element ``start``."""
        return self.buffer.view(dtype)[start:start + numel]

    def copier(self, staged):
        """``copy_in(tensor)``: ``staged.copy_(tensor)`` for a contiguous ``tensor`` of ``staged``'s shape, dtype and
        device, on the current stream (a remembered route's copy, whose key has checked all that)."""
        if staged.device.type == "cuda" and staged.numel():
            return _DriverCopy(staged)
        return staged.copy_  # the cpu backend: a memcpy, no launch


class _DriverCopy:
    """``Tensor.copy_`` of a contiguous tensor into ``staged`` as the one driver call it makes (``cuMemcpyAsync`` on
    the current stream), without torch's dispatch and TensorIterator on the way: a ``copy_`` of a few KiB between
    two tensors of one GPU costs ~10 us of host time on an H200 host, the driver call alone a few. With another
    device current (the driver would use its context), or where the driver refuses (a thread whose context torch has
    not made current yet: then nothing was queued), it is ``copy_`` itself."""

    __slots__ = ("staged", "address", "nbytes", "index")

    def __init__(self, staged):
        self.staged, self.address = staged, staged.data_ptr()
        self.nbytes = staged.numel() * staged.element_size()
        self.index = staged.device.index

    def __call__(self, tensor):
        if private.current_device() == self.index:
            try:
                cuda_driver.copy_1d(self.address, tensor.data_ptr(), self.nbytes, private.current_stream(self.index))
                return
            except RuntimeError:
                pass
        self.staged.copy_(tensor)


def staging_for(ctx, staging_bytes=None):
    """The context's ``Staging``, made on first call. Collective on first call (every rank of the context, same
    ``staging_bytes``): it allocates on the heap. ``staging_bytes`` defaults to ``IRIS_STAGING_BYTES`` or 64 MiB
    on GPUs, 1 MiB on the cpu backend, and at most half of what is left of the heap."""
    staging = ctx.integrations.get("staging")
    if staging is not None:
        if staging_bytes is not None and staging_bytes != staging.nbytes:
            raise ValueError(f"iris staging: this context already stages through {staging.nbytes} bytes; "
                             f"staging_bytes={staging_bytes} cannot change it (the heap cannot free the buffer)")
        return staging
    if staging_bytes is None:
        env = os.environ.get("IRIS_STAGING_BYTES")
        if env:
            staging_bytes = int(env)
        else:
            default = DEFAULT_STAGING_BYTES["cpu" if ctx.get_device().type == "cpu" else "cuda"]
            staging_bytes = min(default, ctx.heap.bytes_left // 2)
    if isinstance(staging_bytes, bool) or not isinstance(staging_bytes, int) or staging_bytes < ALIGN:
        raise ValueError(f"iris staging: staging_bytes={staging_bytes!r} must be an int of at least {ALIGN} bytes "
                         "(IRIS_STAGING_BYTES, or a larger heap_size)")
    staging_bytes -= staging_bytes % ALIGN
    staging = ctx.integrations["staging"] = Staging(ctx, staging_bytes)
    return staging
