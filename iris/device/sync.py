"""Device-side synchronisation between ranks: words on the heap that only grow, never reset.

``flags`` is one row of a group's sync array (``iris/host/groups.py``): ``int64[world_size + 1]``. On rank q's heap,
``flags[r]`` is the word rank r advances with its signals to q on this row; ``flags[world_size]`` is q's own
mismatch record (below).

A signal adds ``2**32 + mark`` to the word, where ``mark`` (24 bits) fingerprints the call that signals: the
operation, dtypes, element counts and root the launcher hashed (``iris/ccl/common.py``, ``fingerprint``), mixed
with the heap offset of one symmetric operand (``call_mark``); 0 for a barrier with no call (``device_barrier``).
A member's word is thus ``(signals << 32) + sum of its marks``, and after the same calls every member holds the
same word: a rank that has signalled as often as we have holds *our* word, unless one of its calls differed
(another operation, size or dtype, or a tensor at another heap offset: a heap allocated differently). A wait
compares the member's word with our own after our signal: ``behind`` by more than ``2**31`` (a whole signal) it
waits; equal, the calls match; within ``2**31`` but not equal, the member made another call with as many
signals, which the wait records (``record_mismatch``) and then passes, so the host raises (the watchdog, and on
the cpu backend the call itself) instead of returning a wrong result or waiting on a row the other call never
signals. More than ``2**31`` ahead, the member has gone on to its next barrier and the words cannot be compared:
the member itself compares ours (one of any two members sees the other at its own count: the one that signalled
its next barrier first passed this one after the other signalled it). One 64-bit add per member and no extra
round trip: the fingerprint rides on the signal the barrier sends anyway.

Words wrap (2**31 signals); every compare is wrap-safe, a difference in the words' own width (``behind``): the
rule of ``cuStreamWaitValue``'s GEQ. Barriers keep waiters within a few signals of the words they poll. The
returned epoch, the word's upper half, is the same on every member after the same calls and grows with every
barrier (by one, or two where the marks carry): kernels stamp per-call flags with it. A failed peer's words are
released relative to their value (``GroupTable.poison`` adds ``2**62``): no fixed value could release a wrap-safe
wait.
"""

import triton
import triton.language as tl

from iris.device.atomics import atomic_add, atomic_xchg
from iris.device.debug import ENABLED, check_wait
from iris.device.translate import INTERPRETED

DEBUG = ENABLED


# A signal's step on a word; the lower 32 bits carry the marks of the calls that signalled.
SIGNAL = tl.constexpr(1 << 32)
# Two words closer than this are at the same count of signals (a signal adds at least SIGNAL, a mark less than 2**24).
SAME_COUNT = tl.constexpr(1 << 31)
MARK_MASK = tl.constexpr((1 << 24) - 1)  # a mark's bits
MISMATCH = tl.constexpr(1 << 62)  # set in a mismatch record: ``MISMATCH | rank << 32 | that rank's mark``


@triton.jit
def signal_all(flags, heap_bases, members, rank, GROUP_SIZE: tl.constexpr, RELEASE: tl.constexpr = True, mark=0):
    """Add a signal (``SIGNAL + mark``, module docstring) to our word of ``flags`` on every member's heap (ours
    included). Release at sys scope: what this program wrote before (to any rank) is visible to a member that
    acquires the word. Without ``RELEASE``, the adds are relaxed (see ``group_barrier``).

    One release for all members: the program meets at ``bar.sync`` (every warp's writes are ordered before
    this thread's next operations), one ``fence.acq_rel.sys``, then relaxed adds; a fence followed by a
    strong write is a release pattern in PTX. A release atomic per member would pay the barrier and the
    system-scope fence once per member."""
    tl.debug_barrier()
    if RELEASE:
        fence_release_sys()
    step = tl.cast(mark, tl.int64) + SIGNAL
    for i in range(GROUP_SIZE):
        peer = tl.load(members + i)
        atomic_add(flags + rank, step, rank, peer, heap_bases, sem="relaxed", scope="sys")


@triton.jit
def fence_release_sys():
    """``fence.acq_rel.sys``: this thread's earlier writes, and those it observed (through ``bar.sync``, the
    other warps' of the program), are ordered before its later writes, for every observer in the system. The
    interpreter runs it as nothing but the race detector's fence (``iris/interpreter/triton.py``): there every
    access is a plain CPU access, seen by the other processes in program order."""
    tl.inline_asm_elementwise("fence.acq_rel.sys; mov.u32 $0, 0;", "=r", [], dtype=tl.int32, is_pure=False, pack=1)


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
    the values. Returns the value that ended the wait. ``iris.wait_until`` for users' kernels."""
    SEM: tl.constexpr = "relaxed" if RELAXED else "acquire"
    seen = tl.atomic_add(flag, 0, sem=SEM, scope="sys")
    if DEBUG:
        spins = 0
        while behind(seen, target):
            spins += 1
            check_wait(spins, rank, peer, seen, target, what)
            seen = tl.atomic_add(flag, 0, sem=SEM, scope="sys")
    else:
        while behind(seen, target):
            seen = tl.atomic_add(flag, 0, sem=SEM, scope="sys")
    return seen


@triton.constexpr_function
def _lanes(group_size):
    return triton.next_power_of_2(group_size)


@triton.jit
def wait_all(flags, members, rank, own, GROUP_SIZE: tl.constexpr, RELAXED: tl.constexpr = False,
             KERNEL_END: tl.constexpr = False, heap_bases=None, record=None, mark=0):
    """Spin until every member's word on our heap has reached ``own``'s count of signals (our word after our
    signal): acquire, sys scope. With ``record`` (and our call's ``mark``), a member whose word is at our count
    but differs from ``own`` made another call: recorded (``record_mismatch``), and the wait passes (module
    docstring). With ``RELAXED`` the spins are relaxed and one acquire load of every member's word, all
    members at once (one lane each), ends the wait: an acquire spin is slower to poll (4.5 against 3.6 us per
    ping-pong round trip on 2 x H200), and a spin per member in turn would pay one acquire per member in
    sequence, since each orders what follows it.

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
    target = own - (SAME_COUNT - 1)  # reached once at most 2**31 - 1 below our word: at our count or past it
    for i in range(GROUP_SIZE):
        peer = tl.load(members + i)
        seen = wait_until(flags + peer, target, rank, peer, "barrier", RELAXED)
        if record is not None:
            apart = seen - own
            if (apart != 0) & (apart < SAME_COUNT):
                record_mismatch(record, heap_bases, rank, peer, mark, apart)
    if RELAXED and not KERNEL_END:
        lanes = tl.arange(0, _lanes(GROUP_SIZE))
        peers = tl.load(members + lanes, mask=lanes < GROUP_SIZE, other=rank)
        tl.atomic_add(flags + peers, 0, mask=lanes < GROUP_SIZE, sem="acquire", scope="sys")


@triton.jit
def record_mismatch(record, heap_bases, rank, peer, mark, apart):
    """``peer``'s word differs from ours by ``apart`` at our count: its last mark was ``mark + apart`` (when the
    calls before matched). Record on our heap what the peer made, and on the peer's what we made, so that each
    host raises, the peer too when it passed this barrier before seeing our word (module docstring)."""
    theirs = (tl.cast(mark, tl.int64) + apart) & MARK_MASK
    # The tensor first: a constexpr on the left of ``|`` makes a constexpr holding a tensor in newer Triton
    tl.atomic_xchg(record, (tl.cast(peer, tl.int64) << 32) | theirs | MISMATCH, sem="relaxed", scope="sys")
    ours = (tl.cast(rank, tl.int64) << 32) | (tl.cast(mark, tl.int64) & MARK_MASK) | MISMATCH
    atomic_xchg(record, ours, rank, peer, heap_bases, sem="relaxed", scope="sys")


@triton.jit
def call_mark(fingerprint, anchor, bases, rank):
    """This call's mark (24 bits): the launcher's ``fingerprint`` of the call mixed with the offset of ``anchor``, a
    symmetric operand, in its allocation (``bases``: its table, the heap's or another provider's). A rank whose heap
    was allocated differently holds the operand at another offset. ``anchor`` is the group's ``flags`` where the
    kernel holds no plain pointer to an operand (TMA descriptors): the same offset everywhere."""
    address = tl.cast(anchor, tl.uint64)
    offset = (address - tl.load(bases + rank).to(tl.uint64)).to(tl.int64)
    h = tl.cast(fingerprint >> 4, tl.int64) * 1099511628211 + tl.where(address == 0, 0, offset)  # empty tensors: 0
    h = (h ^ (h >> 29)) * 2685821657736338717
    return (h >> 32) & MARK_MASK


@triton.jit
def group_barrier(flags, heap_bases, members, rank, GROUP_SIZE: tl.constexpr, RELAXED: tl.constexpr = False,
                  KERNEL_END: tl.constexpr = False, call=None):
    """All members' same-numbered programs meet here. Returns the epoch: the upper half of our word after our
    signal, the same number on every member (module docstring); a kernel can stamp per-call flags with it.

    ``call``, ``(fingerprint, world_size, anchor, anchor_bases)``: the launcher's fingerprint (``GroupSync.args``)
    and a symmetric operand with the bases table it is translated with, matches this call with the members'
    (module docstring); without it the barrier carries mark 0 and compares
    nothing (``device_barrier``).

    By default the barrier releases and acquires at sys scope: what a program wrote to any heap before it is
    visible after it. ``RELAXED`` drops the release fence and polls relaxed, ending with one acquire of every
    member's word (``wait_all``), for the two barriers that order only across kernel boundaries: at a kernel's
    start (what earlier kernels wrote, which the stream completed before this kernel began) and after a
    kernel's last read of peers' memory (a later kernel may overwrite what we read: our loads returned before
    we signalled), as the kernel's last operation (``KERNEL_END``: no acquire either). On 2 x H200 the one-shot
    all_reduce, whose two barriers are both of these, takes 3.9 us at 8 KiB with them relaxed and 7.5 us with
    them fenced (the opening one's final acquire not counted)."""
    SEM: tl.constexpr = "relaxed" if RELAXED else "acquire"
    if call is not None:
        fingerprint, world_size, anchor, anchor_bases = call
        mark = call_mark(fingerprint, anchor, anchor_bases, rank)
        signal_all(flags, heap_bases, members, rank, GROUP_SIZE, RELEASE=not RELAXED, mark=mark)
        own = tl.atomic_add(flags + rank, 0, sem=SEM, scope="sys")
        wait_all(flags, members, rank, own, GROUP_SIZE, RELAXED, KERNEL_END, heap_bases, flags + world_size, mark)
    else:
        signal_all(flags, heap_bases, members, rank, GROUP_SIZE, RELEASE=not RELAXED)
        own = tl.atomic_add(flags + rank, 0, sem=SEM, scope="sys")
        wait_all(flags, members, rank, own, GROUP_SIZE, RELAXED, KERNEL_END)
    return (own >> 32).to(tl.int32)


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
