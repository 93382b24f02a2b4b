"""Device-side synchronisation kernels used by the host API."""

import triton
import triton.language as tl

from iris.device.atomics import atomic_add


@triton.jit
def _device_barrier_kernel(flags, heap_bases, group_ranks, rank, GROUP_SIZE: tl.constexpr):
    """One program. ``flags`` is an int32[world_size] array on the heap; ``flags[r]`` on rank p's heap counts
    how many barriers rank r has entered, as seen by p. Counts only grow, so the count a rank writes to its
    own slot is its epoch and no flag is ever reset (a second barrier cannot read the first one's flag)."""
    # ---- arrive: bump our slot on every member's heap; the release publishes our earlier writes (sys scope:
    # the readers are other GPUs).
    for i in range(GROUP_SIZE):
        peer = tl.load(group_ranks + i)
        atomic_add(flags + rank, 1, rank, peer, heap_bases, sem="release", scope="sys")
    epoch = tl.atomic_add(flags + rank, 0, sem="acquire", scope="sys")
    # ---- wait: every member has bumped its slot on our heap to our epoch; acquire pairs with their release.
    for i in range(GROUP_SIZE):
        peer = tl.load(group_ranks + i)
        while tl.atomic_add(flags + peer, 0, sem="acquire", scope="sys") < epoch:
            pass
