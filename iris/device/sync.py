"""Device-side synchronisation between ranks: words on the heap that only grow, never reset.

``flags`` is one row of a group's sync array (``iris/host/groups.py``): ``int64[world_size + 1]``. On rank q's heap,
``flags[r]`` is the word rank r advances with its signals to q on this row; ``flags[world_size]`` is q's own
mismatch record of the row, and row 0's (``device_barrier``'s row, which compares nothing) is the group's summary
record: set with any row's.

A signal adds ``2**32 + mark`` to the word, where ``mark`` (24 bits) fingerprints the call that signals
(``call_match``): the launcher's hash of the operation, every tensor's dtype and shape, root, op, the launch
shape (programs, block, algorithm: anything that changes the grid or the protocol) and the group
(``iris/ccl/common.py``, ``fingerprint``), mixed in the kernel with the offset of every operand that peers read or
write in its allocation; 0 for a barrier with no call (``device_barrier``). A member's word is thus
``(signals << 32) + sum of its marks``, and after the same calls every member holds the same word: a rank that has
signalled as often as we have holds *our* word, unless one of its calls differed (another operation, shape,
dtype or config, or an operand at another offset: a heap allocated differently). A wait compares the member's
word with our own after our signal: ``behind`` by more than ``2**31`` (a whole signal) it waits; equal, the calls
match; within ``2**31`` but not equal, the member made another call with as many signals, which the wait records
on both heaps (``record_mismatch``). More than ``2**31`` ahead, the member has gone on to its next signal and the
words cannot be compared: the member itself compared ours (one of any two members sees the other at its own
count: the one that signalled again first passed this barrier after the other signalled it) and recorded any
mismatch on our heap before signalling again, so the wait reads our summary record after the acquire. So at a
kernel's first barrier (``open_call``) every member of a mismatched call finds it, before any data moves, and
skips the rest of the kernel: nothing is stored, no later barrier is waited for. A member whose programs have no
namesake on another rank (the grids differ) ends its wait when the summary shows the mismatch its other programs
found. One 64-bit add per member and no extra round trip: the fingerprint rides on the signal the barrier sends
anyway; the operands cost a load of our base and a few integer operations each, before the signal.

A barrier that finds a mismatch also raises the context's alarm, a word in host memory (pinned on GPUs) that
every call's host check reads (``GroupTable.check``): the host raises ``MismatchError`` at the context's next call
after the kernel ran, with or without the watchdog thread (which also reads the records).

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
# Polls of a word between two reads of the summary record (``wait_until``'s ``abort``): a poll is ~1 us on an H200
# (a sys-scope atomic on local memory), so a wait whose namesake never comes ends within ~0.1 ms of the mismatch.
ABORT_POLLS = tl.constexpr(128)


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
def wait_until(flag, target, rank, peer, what: tl.constexpr = tl.constexpr("wait_until"), RELAXED: tl.constexpr = False,
               abort=None):
    """Spin until the local counter ``flag`` (which ``peer`` advances) reaches ``target`` (wrap-safe: ``behind``):
    acquire (relaxed with ``RELAXED``), sys scope: what this program reads after it, the peer wrote before its
    release that reached ``target``. One thread polls (an atomic on one address). With ``abort`` (a local int64
    word), every ``ABORT_POLLS`` polls the word is read too, and a nonzero word ends the wait unreached: the
    caller tells the two apart with ``behind``. In debug mode (``IRIS_DEBUG=1``) the spin is bounded
    (``IRIS_DEBUG_SPIN_LIMIT`` polls) and then stops the kernel naming ``what``, both ranks and the values. Returns
    the value that ended the wait. ``iris.wait_until`` for users' kernels.

    Example::

        @triton.jit
        def send_then_receive(data, got, flag, rank, peer, left, heap_bases, BLOCK: tl.constexpr):
            offs = tl.arange(0, BLOCK)
            iris.store(data + offs, tl.full((BLOCK,), rank, tl.float32), rank, peer, heap_bases)
            iris.atomic_add(flag, 1, rank, peer, heap_bases, sem="release", scope="sys")  # after the data
            iris.wait_until(flag, 1, rank, left)  # left's release reached us: its data is visible below
            tl.store(got + offs, tl.load(data + offs))

        data, got, flag = ctx.zeros(16), ctx.zeros(16), ctx.zeros(1, dtype=torch.int32)
        ctx.barrier()  # every rank's data and flag are zeroed before a peer writes them
        peer, left = (rank + 1) % world_size, (rank - 1) % world_size
        send_then_receive[(1,)](data, got, flag, rank, peer, left, ctx.get_heap_bases(), BLOCK=16)
        assert torch.all(got == left)  # no barrier needed: the flag ordered left's stores before our loads
    """
    SEM: tl.constexpr = "relaxed" if RELAXED else "acquire"
    seen = tl.atomic_add(flag, 0, sem=SEM, scope="sys")
    spins = 0
    if abort is None:
        while behind(seen, target):
            if DEBUG:
                spins += 1
                check_wait(spins, rank, peer, seen, target, what)
            seen = tl.atomic_add(flag, 0, sem=SEM, scope="sys")
    else:
        stop = seen != seen  # False, as a scalar of the loop's type
        while behind(seen, target) & (stop == 0):
            spins += 1
            if DEBUG:
                check_wait(spins, rank, peer, seen, target, what)
            seen = tl.atomic_add(flag, 0, sem=SEM, scope="sys")
            if spins % ABORT_POLLS == 0:  # (in the spin's order: a relaxed barrier's loads all stay relaxed)
                stop = tl.atomic_add(abort, 0, sem=SEM, scope="sys") != 0
    return seen


@triton.constexpr_function
def _lanes(group_size):
    return triton.next_power_of_2(group_size)


@triton.jit
def wait_all(flags, members, rank, own, GROUP_SIZE: tl.constexpr, RELAXED: tl.constexpr = False,
             KERNEL_END: tl.constexpr = False, heap_bases=None, match=None):
    """Spin until every member's word on our heap has reached ``own``'s count of signals (our word after our
    signal): acquire, sys scope. Returns whether every member made our call (always, without ``match``).

    With ``match`` (``call_match``'s, our call's), a member whose word is at our count but differs from ``own``
    made another call: recorded (``record_mismatch``). A member past our count has compared our word itself and
    recorded there if the calls differ: the group's summary record, read after the acquire, says so. A wait also
    ends, unreached, once the summary shows a mismatch found by another program (the members' grids may differ,
    leaving ours without a namesake). On a mismatch the host's alarm word is raised (module docstring).

    With ``RELAXED`` the spins are relaxed and one acquire load of every member's word, all members at once (one
    lane each), ends the wait: an acquire spin is slower to poll (4.5 against 3.6 us per ping-pong round trip on
    2 x H200), and a spin per member in turn would pay one acquire per member in sequence, since each orders what
    follows it.

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
    ok = 1
    ahead = 0
    for i in range(GROUP_SIZE):
        peer = tl.load(members + i)
        if match is not None:
            mark, summary, record, alarm = match
            seen = wait_until(flags + peer, target, rank, peer, "barrier", RELAXED, abort=summary)
            apart = seen - own
            if behind(seen, target):  # ended by the summary
                ok = 0
            elif (apart != 0) & (apart < SAME_COUNT):
                record_mismatch(record, summary, heap_bases, rank, peer, mark, apart)
                ok = 0
            elif apart != 0:
                ahead = 1
        else:
            wait_until(flags + peer, target, rank, peer, "barrier", RELAXED)
    if RELAXED and not KERNEL_END:
        lanes = tl.arange(0, _lanes(GROUP_SIZE))
        peers = tl.load(members + lanes, mask=lanes < GROUP_SIZE, other=rank)
        tl.atomic_add(flags + peers, 0, mask=lanes < GROUP_SIZE, sem="acquire", scope="sys")
    if match is not None:
        mark, summary, record, alarm = match
        if (ahead != 0) & (ok != 0):  # ordered after the acquire of the word that was ahead
            if tl.atomic_add(summary, 0, sem="relaxed" if RELAXED else "acquire", scope="sys") != 0:
                ok = 0
        if ok == 0:
            raise_alarm(alarm)
    return ok != 0


@triton.jit
def raise_alarm(alarm):
    """Set the context's alarm word (``alarm``: its address, in host memory, ``GroupTable.alarm``) to 1."""
    store_host_word(alarm, tl.cast(1, tl.int64))


@triton.jit
def store_host_word(address, value):
    """``value`` (int64) into the word at ``address`` (an int: host memory, pinned on GPUs, that the host reads
    without waiting for the kernel): a system-scope store, not an atomic (device atomics on host memory need PCIe
    atomics, which hosts do not all have)."""
    word = tl.cast(tl.cast(address, tl.int64), tl.pointer_type(tl.int64))
    if INTERPRETED:
        tl.atomic_xchg(word, value, sem="relaxed", scope="sys")
    else:
        tl.inline_asm_elementwise("st.relaxed.sys.global.b64 [$1], $2;\n\tmov.u32 $0, 0;", "=r,l,l",
                                  [word, value], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def record_mismatch(record, summary, heap_bases, rank, peer, mark, apart):
    """``peer``'s word differs from ours by ``apart`` at our count: its last mark was ``mark + apart`` (when the
    calls before matched). Record on our heap what the peer made, and on the peer's what we made, in the row's
    record and in the group's summary, so that each host raises, the peer too when it passed this barrier before
    seeing our word (module docstring). The fence orders the records before this program's later signals."""
    theirs = (tl.cast(mark, tl.int64) + apart) & MARK_MASK
    # The tensor first: a constexpr on the left of ``|`` makes a constexpr holding a tensor in newer Triton
    found = (tl.cast(peer, tl.int64) << 32) | theirs | MISMATCH
    tl.atomic_xchg(record, found, sem="relaxed", scope="sys")
    tl.atomic_xchg(summary, found, sem="relaxed", scope="sys")
    ours = (tl.cast(rank, tl.int64) << 32) | (tl.cast(mark, tl.int64) & MARK_MASK) | MISMATCH
    atomic_xchg(record, ours, rank, peer, heap_bases, sem="relaxed", scope="sys")
    atomic_xchg(summary, ours, rank, peer, heap_bases, sem="relaxed", scope="sys")
    fence_release_sys()


@triton.jit
def call_match(sync, operands):
    """What a kernel's barriers compare (``group_barrier``'s ``call``): this call's mark, from the launcher's
    fingerprint of the call (``GroupSync.args``) mixed with the offset of every operand in ``operands``, a tuple of
    ``(pointer, bases)`` pairs: each symmetric tensor that peers read or write, with the table it is translated
    with (the heap's or another provider's). A rank whose heap was allocated differently holds an operand at
    another offset. A few integer operations and one load of our base per operand, all independent."""
    flags, heap_bases, members, rank, group_index, world_size, fingerprint, tables, alarm = sync
    return (call_mark(fingerprint, operands, rank), flags + world_size, world_size, alarm)


@triton.jit
def call_mark(fingerprint, operands, rank):
    """The mark (24 bits) of a call: ``fingerprint`` mixed with each operand's offset in its allocation
    (``call_match``). An empty tensor's pointer is 0 and mixes in 0."""
    h = tl.cast(fingerprint >> 4, tl.int64)
    for i in tl.static_range(len(operands)):
        pointer, bases = operands[i]
        address = tl.cast(pointer, tl.uint64)
        offset = (address - tl.load(bases + rank).to(tl.uint64)).to(tl.int64)
        h = h * 1099511628211 + tl.where(address == 0, 0, offset)
        h = h ^ (h >> 29)
    h = h * 2685821657736338717
    return (h >> 32) & MARK_MASK


@triton.jit
def group_mismatched(sync):
    """Whether a barrier of the group has found the members' calls disagreeing (its summary record): for a kernel
    that stores to peers before its first barrier, after an earlier kernel of the same call opened it
    (``open_call``), which every member then finds mismatched alike."""
    flags, heap_bases, members, rank, group_index, world_size, fingerprint, tables, alarm = sync
    return tl.atomic_add(flags + world_size, 0, sem="relaxed", scope="sys") != 0


@triton.jit
def _barrier(flags, heap_bases, members, rank, GROUP_SIZE: tl.constexpr, RELAXED: tl.constexpr,
             KERNEL_END: tl.constexpr, call):
    """``group_barrier``'s work: ``(epoch, ok)``."""
    SEM: tl.constexpr = "relaxed" if RELAXED else "acquire"
    if call is not None:
        mark, summary, world_size, alarm = call
        signal_all(flags, heap_bases, members, rank, GROUP_SIZE, RELEASE=not RELAXED, mark=mark)
        own = tl.atomic_add(flags + rank, 0, sem=SEM, scope="sys")
        ok = wait_all(flags, members, rank, own, GROUP_SIZE, RELAXED, KERNEL_END, heap_bases,
                      (mark, summary, flags + world_size, alarm))
    else:
        signal_all(flags, heap_bases, members, rank, GROUP_SIZE, RELEASE=not RELAXED)
        own = tl.atomic_add(flags + rank, 0, sem=SEM, scope="sys")
        ok = wait_all(flags, members, rank, own, GROUP_SIZE, RELAXED, KERNEL_END)
    return (own >> 32).to(tl.int32), ok


@triton.jit
def group_barrier(flags, heap_bases, members, rank, GROUP_SIZE: tl.constexpr, RELAXED: tl.constexpr = False,
                  KERNEL_END: tl.constexpr = False, call=None):
    """All members' same-numbered programs meet here. Returns the epoch: the upper half of our word after our
    signal, the same number on every member (module docstring); a kernel can stamp per-call flags with it.

    ``call`` (``call_match``'s) matches this call with the members' (module docstring); without it the barrier
    carries mark 0 and compares nothing (``device_barrier``). A kernel's first barrier is ``open_call``, which
    also says whether the calls matched.

    By default the barrier releases and acquires at sys scope: what a program wrote to any heap before it is
    visible after it. ``RELAXED`` drops the release fence and polls relaxed, ending with one acquire of every
    member's word (``wait_all``), for the two barriers that order only across kernel boundaries: at a kernel's
    start (what earlier kernels wrote, which the stream completed before this kernel began) and after a
    kernel's last read of peers' memory (a later kernel may overwrite what we read: our loads returned before
    we signalled), as the kernel's last operation (``KERNEL_END``: no acquire either). On 2 x H200 the one-shot
    all_reduce, whose two barriers are both of these, takes 3.9 us at 8 KiB with them relaxed and 7.5 us with
    them fenced (the opening one's final acquire not counted)."""
    return _barrier(flags, heap_bases, members, rank, GROUP_SIZE, RELAXED, KERNEL_END, call)[0]


@triton.jit
def open_call(flags, heap_bases, members, rank, GROUP_SIZE: tl.constexpr, call, RELAXED: tl.constexpr = False):
    """A kernel's first barrier (``group_barrier`` with ``call``), before any store to a user's tensor or a peer:
    returns ``(epoch, ok)``, ``ok`` true when every member made this call. Otherwise the kernel skips everything after
    (its data phase and its later barriers: every member of the call finds the mismatch here, module docstring),
    so a mismatched call writes nothing, and the host raises ``MismatchError``."""
    return _barrier(flags, heap_bases, members, rank, GROUP_SIZE, RELAXED, False, call)


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
