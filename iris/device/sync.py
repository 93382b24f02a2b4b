"""Device-side synchronisation between ranks: counters on the heap, never reset.

``flags`` is one row ``int32[world_size]`` of a group's sync array (``iris/host/groups.py``): on rank q's
heap, ``flags[r]`` counts the signals rank r has sent q on this row.
"""

import triton
import triton.language as tl

from iris.device.atomics import atomic_add


@triton.jit
def signal_others(flags, heap_bases, members, rank, GROUP_SIZE: tl.constexpr):
    """Add one to our slot of ``flags`` on every other member's heap. Release at sys scope: what this program
    wrote before (to any rank) is visible to a member that acquires the count."""
    for i in range(GROUP_SIZE):
        peer = tl.load(members + i)
        if peer != rank:
            atomic_add(flags + rank, 1, rank, peer, heap_bases, sem="release", scope="sys")


@triton.jit
def wait_others(flags, members, rank, epoch, GROUP_SIZE: tl.constexpr):
    """Spin until every other member's count on our heap has reached ``epoch`` (acquire, sys scope)."""
    for i in range(GROUP_SIZE):
        peer = tl.load(members + i)
        if peer != rank:
            while tl.atomic_add(flags + peer, 0, sem="acquire", scope="sys") < epoch:
                pass


@triton.jit
def group_barrier(flags, heap_bases, members, rank, GROUP_SIZE: tl.constexpr):
    """All members' same-numbered programs meet here. Our own slot on our own heap counts our arrivals:
    only this program touches it, so it is a plain load and store, and one sys-scope release atomic per
    peer (not per member) is all a barrier costs. A member that reached this barrier as often as we have
    has raised its slot on our heap to the same count."""
    epoch = tl.load(flags + rank, volatile=True) + 1
    tl.store(flags + rank, epoch)
    signal_others(flags, heap_bases, members, rank, GROUP_SIZE)
    wait_others(flags, members, rank, epoch, GROUP_SIZE)


@triton.jit
def _device_barrier_kernel(flags, heap_bases, members, rank, GROUP_SIZE: tl.constexpr):
    """One program, on row 0 of the group's flags."""
    group_barrier(flags, heap_bases, members, rank, GROUP_SIZE)
