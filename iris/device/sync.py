"""Device-side synchronisation between ranks: counters on the heap, never reset.

``flags`` is one row ``int32[world_size]`` of a group's sync array (``iris/host/groups.py``): on rank q's
heap, ``flags[r]`` counts the signals rank r has sent q on this row.

Counts are int32 and wrap (2**31 calls of a 3.8 us all_reduce take 70 minutes): every comparison of a count with
its target is wrap-safe: ``seen`` is behind ``target`` when ``(int32)(seen - target) < 0``, the rule of
``cuStreamWaitValue32``'s GEQ. It holds while no waiter's target is 2**31 or more counts away from the count it
polls, and barriers keep them within a few counts: a rank signals a row once per call and cannot start the next
call's wait before every member has signalled this one. The alternative, 64-bit counts, would double the flag
arrays and make every poll a 64-bit access and compare for a bound no run reaches either way; the wrap-safe
compare costs one subtraction per poll and changes no dtype. No fixed poison value can release a wrap-safe wait
(every value is "behind" half of the targets), so a failed peer's counts are released relative to their value
(``GroupTable.poison`` adds 2**30).
"""

import triton
import triton.language as tl

from iris.device.atomics import atomic_add
from iris.device.debug import ENABLED, check_wait
from iris.device.translate import INTERPRETED

DEBUG = ENABLED


@triton.jit
def signal_all(flags, heap_bases, members, rank, GROUP_SIZE: tl.constexpr, RELEASE: tl.constexpr = True):
    """Add one to our slot of ``flags`` on every member's heap (ours included). Release at sys scope: what
    this program wrote before (to any rank) is visible to a member that acquires the count. Without
    ``RELEASE``, the adds are relaxed (see ``group_barrier``).

    One release for all members: the program meets at ``bar.sync`` (every warp's writes are ordered before
    this thread's next operations), one ``fence.acq_rel.sys``, then relaxed adds; a fence followed by a
    strong write is a release pattern in PTX. A release atomic per member would pay the barrier and the
    system-scope fence once per member."""
    tl.debug_barrier()
    if RELEASE:
        fence_release_sys()
    for i in range(GROUP_SIZE):
        peer = tl.load(members + i)
        atomic_add(flags + rank, 1, rank, peer, heap_bases, sem="relaxed", scope="sys")


@triton.jit
def fence_release_sys():
    """``fence.acq_rel.sys``: this thread's earlier writes, and those it observed (through ``bar.sync``, the
    other warps' of the program), are ordered before its later writes, for every observer in the system. No-op
    when interpreted: there every access is a plain CPU access, seen by the other processes in program order."""
    if not INTERPRETED:
        tl.inline_asm_elementwise("fence.acq_rel.sys; mov.u32 $0, 0;", "=r", [], dtype=tl.int32, is_pure=False,
                                  pack=1)


@triton.jit
def count_published(counter, WARPS: tl.constexpr):
    """Add ``WARPS`` (the program's warp count) to the local int32 ``counter`` once this program's earlier stores
    are visible to every observer in the system, the copy engines and the streams' memory operations included,
    so that a side stream waiting for the count may copy what the program stored. Each warp meets at
    ``bar.warp.sync`` (which orders its lanes' accesses), then its first lane fences at system scope and adds one.
    No program-wide ``bar.sync``: in the fused kernel's flattened tile loop one keeps Triton 3.6 from
    software-pipelining the loop (3x slower on H200)."""
    if INTERPRETED:
        tl.atomic_add(counter, WARPS, sem="release", scope="sys")
    else:
        tl.inline_asm_elementwise(
            "{ .reg .pred first; .reg .u32 lane; bar.warp.sync -1; mov.u32 lane, %laneid; setp.eq.u32 first, lane, 0;"
            " @first fence.acq_rel.sys; @first red.relaxed.sys.global.add.u32 [$1], 1; mov.u32 $0, 0; }",
            "=r,l", [counter], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def behind(seen, target):
    """Whether the count ``seen`` has yet to reach ``target``, across the wrap: ``seen - target`` in the counts' own
    width, wrapping, is negative (module docstring)."""
    return tl.cast(seen - target, seen.dtype) < 0


@triton.jit
def wait_until(flag, target, rank, peer, what: tl.constexpr = "wait_until", RELAXED: tl.constexpr = False):
    """Spin until the local counter ``flag`` (which ``peer`` advances) reaches ``target`` (wrap-safe: ``behind``):
    acquire (relaxed with ``RELAXED``), sys scope: what this program reads after it, the peer wrote before its
    release that reached ``target``. One thread polls (an atomic on one address). In debug mode (``IRIS_DEBUG=1``)
    the spin is bounded (``IRIS_DEBUG_SPIN_LIMIT`` polls) and then stops the kernel naming ``what``, both ranks and
    the values; ``iris.wait_until`` for users' kernels."""
    SEM: tl.constexpr = "relaxed" if RELAXED else "acquire"
    if DEBUG:
        spins = 0
        seen = tl.atomic_add(flag, 0, sem=SEM, scope="sys")
        while behind(seen, target):
            spins += 1
            check_wait(spins, rank, peer, seen, target, what)
            seen = tl.atomic_add(flag, 0, sem=SEM, scope="sys")
    else:
        while behind(tl.atomic_add(flag, 0, sem=SEM, scope="sys"), target):
            pass


@triton.constexpr_function
def _lanes(group_size):
    return triton.next_power_of_2(group_size)


@triton.jit
def wait_all(flags, members, rank, epoch, GROUP_SIZE: tl.constexpr, RELAXED: tl.constexpr = False,
             KERNEL_END: tl.constexpr = False):
    """Spin until every member's count on our heap has reached ``epoch``: acquire, sys scope. With ``RELAXED`` the
    spins are relaxed and one acquire load of every member's count, all members at once (one lane each), ends
    the wait: an acquire spin is slower to poll (4.5 against 3.6 us per ping-pong round trip on 2 x H200), and a
    spin per member in turn would pay one acquire per member in sequence, since each orders what follows it.

    Why the last read must be an acquire even at a kernel's start: the peer's signal is relaxed, but it follows
    the peer's earlier kernels, whose writes the stream completes (at sys scope, as a peer or the host reading
    them after a stream wait relies on) before the signalling kernel starts. On our side nothing orders the loads
    after the wait behind a relaxed read: in the PTX memory model a strong read synchronizes with a release
    pattern only as part of an acquire pattern (an ``ld.acquire``, or a read followed by ``fence.acq_rel``),
    and without one our later loads of the peer's data may be served before the flag was seen (an L1 line, or
    a load issued early). The acquire load costs one more local L2 round trip per barrier, all members in
    parallel (about 0.5 us on H100/H200); ``fence.acq_rel.sys`` instead would also wait for our own remote
    signals to be acknowledged. ``KERNEL_END``: nothing follows the wait in this kernel, so a relaxed wait needs no
    acquire (the stream orders the next kernel after it)."""
    for i in range(GROUP_SIZE):
        peer = tl.load(members + i)
        wait_until(flags + peer, epoch, rank, peer, "barrier", RELAXED)
    if RELAXED and not KERNEL_END:
        lanes = tl.arange(0, _lanes(GROUP_SIZE))
        peers = tl.load(members + lanes, mask=lanes < GROUP_SIZE, other=rank)
        tl.atomic_add(flags + peers, 0, mask=lanes < GROUP_SIZE, sem="acquire", scope="sys")


@triton.jit
def group_barrier(flags, heap_bases, members, rank, GROUP_SIZE: tl.constexpr, RELAXED: tl.constexpr = False,
                  KERNEL_END: tl.constexpr = False):
    """All members' same-numbered programs meet here. Our own count on our heap, once bumped, is the
    epoch: a member that reached this barrier as often as we have has bumped its slot to it too. Returns the
    epoch, the same number on every member: a kernel can stamp per-call flags with it.

    By default the barrier releases and acquires at sys scope: what a program wrote to any heap before it is
    visible after it. ``RELAXED`` drops the release fence and polls relaxed, ending with one acquire of every
    member's count (``wait_all``), for the two barriers that order only across kernel boundaries: at a kernel's
    start (what earlier kernels wrote, which the stream completed before this kernel began) and after a
    kernel's last read of peers' memory (a later kernel may overwrite what we read: our loads returned before
    we signalled), as the kernel's last operation (``KERNEL_END``: no acquire either). On 2 x H200 the one-shot
    all_reduce, whose two barriers are both of these, takes 3.9 us at 8 KiB with them relaxed and 7.5 us with
    them fenced (the opening one's final acquire not counted)."""
    signal_all(flags, heap_bases, members, rank, GROUP_SIZE, RELEASE=not RELAXED)
    SEM: tl.constexpr = "relaxed" if RELAXED else "acquire"
    epoch = tl.atomic_add(flags + rank, 0, sem=SEM, scope="sys")
    wait_all(flags, members, rank, epoch, GROUP_SIZE, RELAXED, KERNEL_END)
    return epoch


@triton.jit
def _device_barrier_kernel(flags, heap_bases, members, rank, GROUP_SIZE: tl.constexpr):
    """One program, on row 0 of the group's flags."""
    group_barrier(flags, heap_bases, members, rank, GROUP_SIZE)


@triton.jit
def call_epoch(call):
    """This launch's number, from a per-op counter ``call`` (int32[2] or [3] on the device, zeroed once): 1 on the
    first call, then 2, ... Every rank makes the same calls, so the number agrees across ranks and can stamp
    flags that are never reset. Pair with ``finish_call`` at the end of every program."""
    return tl.atomic_add(call, 0, sem="acquire", scope="gpu") + 1


@triton.jit
def next_tile(call):
    """A ticket for the next unit of work of this launch (0, 1, 2, ... across all its programs), from
    ``call[2]``: programs that start late, or finish other work first, take what is left. Needs the
    int32[3] form of ``call``, and ``finish_call(call, TICKETS=True)``, which zeroes it for the next launch."""
    return tl.atomic_add(call + 2, 1, sem="relaxed", scope="gpu")


@triton.jit
def finish_call(call, TICKETS: tl.constexpr = False):
    """The last program of the launch to get here advances the counter: every program read it before (and,
    with ``TICKETS``, drew its last ``next_tile`` ticket before, so that counter is zeroed here too)."""
    ticket = tl.atomic_add(call + 1, 1, sem="acq_rel", scope="gpu")
    if ticket == tl.num_programs(0) - 1:
        tl.atomic_xchg(call + 1, 0, sem="relaxed", scope="gpu")
        if TICKETS:
            tl.atomic_xchg(call + 2, 0, sem="relaxed", scope="gpu")
        tl.atomic_add(call, 1, sem="release", scope="gpu")


@triton.jit
def fence_async_proxy():
    """Order what this thread observed through ordinary loads (an acquired flag, and with it a peer's stores)
    before its later tensor-memory (TMA) reads: those go through the async proxy, which an acquire alone
    does not order on Hopper. Call after a wait, before TMA loads of the data it guards. No-op when
    interpreted."""
    if not INTERPRETED:
        tl.inline_asm_elementwise("fence.proxy.async.global; mov.u32 $0, 0;", "=r", [], dtype=tl.int32,
                                  is_pure=False, pack=1)
