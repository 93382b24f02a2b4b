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
``CollectiveConfig.one_shot_max_bytes`` stages its input inside its kernel and writes the caller's tensor directly,
reduce_scatter and reduce stage their input, all_gather and all_to_all their output. The two-shot all_reduce
(above 1 MiB), the uneven all_to_all and the equal one past one chunk copy both ways.
"""

import os

import torch

from iris.iris import Iris


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


def staging_for(ctx: Iris, staging_bytes: int | None = None) -> Staging:
    """The context's ``Staging``, made on first call. Collective on first call (every rank of the context, same
    ``staging_bytes``): it allocates on the heap. ``staging_bytes`` defaults to ``IRIS_STAGING_BYTES`` or 64 MiB
    on GPUs, 1 MiB on the cpu backend, and at most half of what is left of the heap.

    Raises ``ValueError`` for a ``staging_bytes`` below 256 bytes, or other than that of the buffer the context
    already has (the heap cannot free it).

    Example::

        import iris.distributed
        staging = iris.distributed.staging_for(ctx)  # the first call allocates, on every rank
        assert staging is iris.distributed.staging_for(ctx) and staging.nbytes % 256 == 0
        assert staging.view(torch.float32, 16).shape == (16,)  # a view of the buffer, on the heap
    """
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
