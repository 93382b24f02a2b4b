"""Per-group synchronisation state on the heap: the flags behind ``device_barrier`` and every collective.

Each group of ranks owns an int64 array ``flags[ROWS, world_size + 1]`` in a region reserved at the end of the
heap: one of ``slots(world_size)`` such arrays. Row 0 serves ``device_barrier``; row ``1 + p`` serves program
``p`` of a collective kernel. On rank q's heap, ``flags[row, r]`` is the word rank r advances each time it signals
that row to q: the count of its signals in the upper half, the sum of its calls' marks below (``iris/device/sync.py``);
``flags[row, world_size]`` is q's mismatch record of that row (``mismatches``). Words only grow, so no flag is ever
reset and a second call can never read the first call's flag (docs/design.md, "Memory-model rules"); they wrap,
and every comparison is wrap-safe.

Slot 0 is the whole world's. Any other group's slot is agreed by its members at the group's first use: each
publishes the slots it already uses (through the store, so pairs and groups without a process group of their own
work too) and all take the lowest one free on every member. Only members read or write a group's flags, and
they all hold the group's array at the same offset, which is what translation needs; non-members take no part,
so a group used on some ranks only leaves every heap's allocations as they were. A group of any size works; the
region is bounded: ``slots`` arrays, enough for every pair (``send``/``recv``) with the world plus
``SUBGROUP_SLOTS`` larger groups, 20 MiB at 72 ranks and 1.3 MiB at 8.

A slot comes back when its group goes (``release``): once every member's collector has taken the group's
ProcessGroups, at the heap's next agreement (``iris/host/memory/workspaces.py``), so every member frees it at the same
point of its calls, with no kernel in flight (the agreement drains each rank's stream first). Each member zeroes
its copy of the array then: a free slot holds zeros on every rank that does not use it, so the members of the
next group to take it all start from the same counts, whoever held it before (the counts of a barrier are
only comparable between members that started them together).

When a peer fails (``iris/host/watchdog.py``), its column of every row on our heap advances by ``POISON_STEP``,
so every wait for it completes, and from then on the table refuses to hand out sync state: every collective,
``device_barrier`` and host barrier raises ``PeerError``.
"""

import threading
from dataclasses import dataclass

import torch

from iris.platform import cuda_driver
from iris.errors import ClosedError, PeerError

# The most programs a collective or fused kernel may use (the flag rows are sized by it): above the SM count
# of the GPUs we run on (132 on an H100/H200), so a persistent fused kernel can take every SM.
MAX_COMM_PROGRAMS = 256
ROWS = 1 + MAX_COMM_PROGRAMS
SUBGROUP_SLOTS = 64  # groups other than the world and the pairs that one rank can be a member of at once
# A failed peer's words advance by this much: past every target a waiter can hold (a barrier keeps it within a
# few signals of the word it polls), yet less than 2**63 ahead, so the wrap-safe compare sees it as reached.
POISON_STEP = 1 << 62
# The same for the kernels' own int32 per-peer flags (``register_peer_flags``), which hold counts.
PEER_FLAGS_STEP = 1 << 30
# An empty record and the bit that marks a full one (``iris/device/sync.py``, ``record_mismatch``).
MISMATCH = 1 << 62
MARK_MASK = (1 << 24) - 1
SAME_COUNT = 1 << 31
# The row ``waits`` gives a group's slot agreement (a host wait at the group's first use): no row of the flags.
AGREEING = -1
# For counters zeroed at every call (the ops' copy-queue counts, compared wrap-safe by the stream's GEQ wait):
# far above any count one call reaches, raising them all past their targets.
POISON = 1 << 30


def slots(world_size):
    """Group arrays in the region: the world, one per pair a rank is in, and ``SUBGROUP_SLOTS`` more."""
    return 1 if world_size == 1 else world_size + SUBGROUP_SLOTS


def slot_words(world_size):
    """int64 words of one group's array: ``ROWS`` rows of a word per rank and a mismatch record."""
    return ROWS * (world_size + 1)


def region_bytes(world_size):
    return slots(world_size) * slot_words(world_size) * 8


@dataclass
class GroupSync:
    ranks: list          # global ranks of the members, ascending
    index: int           # this rank's position in ``ranks``
    flags: torch.Tensor  # int64[ROWS, world_size + 1] on the heap
    members: torch.Tensor  # int32[len(ranks)] on the device: ``ranks`` for kernels

    @property
    def size(self):
        return len(self.ranks)

    def args(self, ctx, fingerprint, tables=None):
        """The group's kernel argument, one tuple that kernels unpack as ``flags, heap_bases, members, rank,
        group_index, world_size, fingerprint, tables, alarm`` (our rank and the world size are ``ctx``'s;
        ``fingerprint`` the call's, from ``iris.ccl.common.fingerprint``, which a kernel's barriers carry to the
        members; ``tables`` the bases tables of the operands peers read and of those they write,
        ``ctx.symmetric_table``: the heap's unless a tensor comes from another provider; ``alarm`` the address of the
        word a barrier raises on a mismatch, ``GroupTable.alarm``: an int, since Triton's launcher spends a call of
        ``data_ptr()`` and a driver query on every tensor argument). The sync flags and the library's workspaces are
        always translated with ``heap_bases``."""
        if tables is None:
            tables = (ctx.heap_bases, ctx.heap_bases)
        return (self.flags, ctx.heap_bases, self.members, ctx.cur_rank, self.index, ctx.num_ranks, fingerprint,
                tables, ctx.groups.alarm.data_ptr())


class GroupTable:
    def __init__(self, region, world_size, rank, device, agree=None):
        """``agree(ranks, value, check, round=None)``: every rank of ``ranks`` passes ``value`` and gets the list of
        them, calling ``check`` while it waits (``StoreExchange``; ``round`` tells a later agreement of the same
        ranks from the first); needed for groups other than the world."""
        self.region = region.view(torch.int64).zero_()
        self.world_size = world_size
        self.slots = self.region.numel() // slot_words(world_size)  # group arrays the region holds
        self.rank = rank
        self.device = device
        self.agree = agree
        self.failure = None  # set by the watchdog: why peers can no longer be waited for
        self.closed = False  # set by Iris.close: the heap's mappings are gone
        self.last_call = None  # what this rank called last (every call that talks to peers checks)
        self.last_text = None  # that call with its arguments, when a launcher described it (``fingerprint``)
        self.failure_type = PeerError  # what ``failure`` is raised as (MismatchError after calls disagreed)
        self.surfaced = False  # ``failure`` has been raised in this rank's own thread (``Watchdog.settle`` asks)
        # Set by the watchdog: called by ``check`` on the cpu backend when a record shows calls that disagreed
        # (there kernels run in the calling thread, so the call that disagreed raises, not a later one)
        self.on_mismatch = None
        self.on_raise = None  # set by the watchdog: called before ``reraise`` raises the failure (``_withdraw``)
        self.agreeing = None  # the ranks of a group whose slot this rank is agreeing on now (a host wait)
        self._groups = {}
        self._slots = {}  # group ranks -> slot, for the groups other than the world
        self._used = {0}  # slots of the groups this rank belongs to
        self._agreements = {}  # group ranks -> slot agreements made so far (each a round of its own in the store)
        self._on_agreed = []  # callbacks(ranks) after a group's slot is agreed (workspaces watch its lifetime)
        self._peer_flags = []  # (int32 tensor [group size, n], group ranks): kernels' own per-peer flag rows
        self._poisoned = set()  # peers whose waits ``poison`` has released
        self._poison_stream = self._host_copy = None
        self._relaxed = set()  # threads whose capture mode is relaxed (``_relax``)
        # Raised (set to 1) by a kernel whose barrier found the members' calls disagreeing (``iris/device/sync.py``):
        # host memory the kernels write (pinned, mapped into the device, on GPUs), read by ``check`` at every call
        self.alarm = torch.zeros(1, dtype=torch.int64, pin_memory=device.type == "cuda")
        self._alarm = memoryview(self.alarm.numpy())  # its one word read in ~30 ns (a numpy index: ~55)
        if device.type == "cuda":
            # Made now, not when a peer fails: creating a stream while a kernel of ours spins blocked for
            # good on H200s shared by two rank processes (simulation), and so may a pinned allocation.
            self._poison_stream = torch.cuda.Stream(device)
            self._grow_host_copy(self.region.nbytes)
        # The world's state now, outside any CUDA graph pool: a first collective inside torch.compile's
        # "reduce-overhead" warm-up would otherwise leave its members tensor alive in the graph's pool.
        self.get(list(range(world_size)), "iris.iris")

    def check(self, caller, entering=True):
        """Raise ``PeerError`` once a peer has failed (a call that waits for peers would wait forever), and a
        ``RuntimeError`` once the context is closed (a kernel would run on memory it gave back). Also
        ``MismatchError`` once a kernel's barrier found the ranks' calls disagreeing and raised the alarm
        (``on_mismatch``): on the cpu backend the call that disagreed raises (its kernels ran in this thread), on
        GPUs the first call after its kernel ran."""
        if entering:  # a check after a launch (``entering=False``) leaves the call's own name
            self.last_call = caller
        if self._alarm[0] and self.failure is None and self.on_mismatch is not None and not self.closed:
            self.on_mismatch()
        if self.failure is not None:
            self.surfaced = True
            self.reraise(self.failure_type(f"{caller}: {self.failure}"))
        if self.closed:
            raise ClosedError(caller)

    def reraise(self, error):
        """Raise ``error`` in this thread: ``check``'s, or one raised first in another thread (a copy lane's, handed
        over when the call collects it). This table's failure withdraws the copy the watchdog may have queued for
        this thread (``on_raise``), so it surfaces once."""
        if isinstance(error, PeerError) and self.on_raise is not None:
            self.on_raise()
        raise error

    def get(self, ranks, caller):
        """The sync state of the group of ``ranks`` (ascending; this rank must be one of them). Collective over
        ``ranks`` at a group's first use, which agrees on its slot and allocates a small device tensor: call
        once outside a CUDA graph capture before capturing. Raises ``PeerError`` once a peer has failed."""
        self.check(caller)
        key = tuple(ranks)
        state = self._groups.get(key)
        if state is None:
            slot = 0 if len(ranks) == self.world_size else self._agree_slot(list(ranks), caller)
            if slot:
                self._slots[key] = slot
                for callback in self._on_agreed:
                    callback(key)
            size = slot_words(self.world_size)
            flags = self.region[slot * size:(slot + 1) * size].view(ROWS, self.world_size + 1)
            members = torch.tensor(ranks, dtype=torch.int32, device=self.device)
            state = self._groups[key] = GroupSync(list(ranks), ranks.index(self.rank), flags, members)
        return state

    def _agree_slot(self, ranks, caller):
        """The lowest slot that no member of ``ranks`` uses yet: every member computes it from the same lists."""
        if self.agree is None:
            raise ValueError(f"{caller}: this table has no exchange, so it only serves the whole world, not {ranks}")
        # A group dropped and made again agrees again, in a round of its own: the first round's keys are still in
        # the store, and reading them would skip the wait (a member could signal a slot a peer has yet to zero).
        key = tuple(ranks)
        agreement = self._agreements[key] = self._agreements.get(key, 0) + 1
        self.agreeing = key  # for ``waits``: a host wait for every other member
        try:
            used = set().union(*self.agree(ranks, sorted(self._used), lambda: self.check(caller),
                                           round=None if agreement == 1 else agreement))
        finally:
            self.agreeing = None
        slot = next((s for s in range(1, self.slots) if s not in used), None)
        if slot is None:
            raise ValueError(f"{caller}: the group {ranks} needs sync flags, but a member already belongs to "
                             f"{len(used)} groups, the most the heap's sync region holds ({self.slots}: the world, "
                             f"a pair with each peer and {self.slots - self.world_size} others); use fewer groups at "
                             "once: a dropped group's flags come back once every member has dropped its "
                             "ProcessGroups and called ctx.empty_cache() (or allocated on the heap long enough to "
                             "reach an agreement)")
        self._used.add(slot)
        return slot

    def on_agreed(self, callback):
        """Call ``callback(ranks)`` each time a group other than the world gets a slot."""
        self._on_agreed.append(callback)

    def release(self, ranks):
        """Free the slot of the group of ``ranks`` on this rank and zero this rank's copy of its counts; nothing
        for the world or a group without one. Call it at the same point of the calls on every member, with no
        kernel of the group in flight on any member (as the heap's agreements do): a later use of the group
        agrees on a slot again."""
        key = tuple(ranks)
        slot = self._slots.pop(key, None)
        if slot is None:
            return
        state = self._groups.pop(key)
        state.flags.zero_()
        if self.device.type == "cuda":
            # Zeroed before this rank's next exchange of slots: a peer that takes the slot with us signals it
            # only after that exchange.
            torch.cuda.current_stream(self.device).synchronize()
        self._used.discard(slot)

    def register_peer_flags(self, flags, ranks):
        """Have ``poison`` release waits on ``flags`` too: an int32 [len(ranks), n] heap tensor whose row i
        only group member ``ranks[i]`` advances (the fused ops' per-tile and per-block flags)."""
        self._peer_flags.append((flags, list(ranks)))
        if self._host_copy is not None:
            self._grow_host_copy(flags[0].nbytes)

    def unregister_peer_flags(self, flags):
        """Stop releasing waits on ``flags``: their bytes may be handed out again."""
        self._peer_flags = [(f, r) for f, r in self._peer_flags if f is not flags]

    def waits(self):
        """Where this rank waits now: ``{(group ranks, row): (the members behind, our count)}`` for every row of
        every group where a member's word is a whole signal or more behind ours (a barrier we entered and it has
        not). Reads the flags without disturbing a spinning kernel (on GPUs a copy on the table's own stream).
        Row ``AGREEING`` of a group stands for the agreement on its slot at its first use, a host wait for the
        members that have not arrived, counted as every other member (one that has arrived waits there too, until
        all have). Called from the watchdog thread."""
        agreeing = self.agreeing
        found = {} if agreeing is None else {(agreeing, AGREEING): ([r for r in agreeing if r != self.rank], 0)}
        for ranks, sync in list(self._groups.items()):
            words = self._on_host(sync.flags).numpy()[:, ranks]  # int64 [ROWS, members]
            ours = words[:, sync.index:sync.index + 1]
            # behind, wrap-safe as the device compares (iris/device/sync.py): the int64 difference wraps
            late = (words - ours) <= -SAME_COUNT  # [ROWS, members]
            for row in late.any(axis=1).nonzero()[0]:
                found[(tuple(ranks), int(row))] = ([r for r, is_late in zip(ranks, late[row]) if is_late],
                                                  int(ours[row, 0]) >> 32)
        return found

    def mismatches(self):
        """The calls that did not match, from this rank's mismatch records: ``[(group ranks, row, the other rank,
        its mark)]``, empty when every call matched. Called by the watchdog thread, and after each call on the cpu
        backend (where the records are host memory: one scan of a column)."""
        found = []
        for ranks, sync in list(self._groups.items()):
            records = self._on_host(sync.flags).numpy()[:, -1]
            for row in records[1:].nonzero()[0] + 1:  # row 0's record is the group's summary of the others
                value = int(records[row])
                found.append((tuple(ranks), int(row), (value & ~MISMATCH) >> 32, value & MARK_MASK))
        return found

    def _on_host(self, array):
        """The heap ``array`` where this thread can read it: the array itself on the cpu backend (its pages are
        host memory), else the table's pinned buffer, copied into on the table's own stream beside any spinning
        kernel (a copy engine's transfer) and synchronised."""
        if self.device.type == "cpu":
            return array
        torch.cuda.set_device(self.device)
        self._relax()
        host = self._host_copy[:array.numel() * array.element_size()].view(array.dtype).view(array.shape)
        with torch.cuda.stream(self._poison_stream):
            host.copy_(array, non_blocking=True)  # contiguous: one copy-engine transfer
        self._poison_stream.synchronize()
        return host

    def _relax(self):
        """Once per thread that reads or poisons (the watchdog's, and the context's when its check finds the alarm
        raised): its copies and synchronisations must not break a graph capture another thread runs, nor be refused
        by it (``cuda_driver.relax_capture_mode``)."""
        thread = threading.get_ident()
        if thread not in self._relaxed:
            cuda_driver.relax_capture_mode()
            self._relaxed.add(thread)

    def _grow_host_copy(self, nbytes):
        """Pinned host buffer of ``nbytes`` or more for ``_on_host`` and ``poison``'s round trip."""
        if self._host_copy is None or self._host_copy.numel() < nbytes:
            self._host_copy = torch.empty((nbytes,), dtype=torch.uint8, pin_memory=True)

    def poison(self, peer):
        """Complete every wait for ``peer`` on this rank: its column of every row of every group's flags advances
        by ``POISON_STEP`` and its row of every registered flag array by ``PEER_FLAGS_STEP`` (wrapping): past every
        target a waiter holds, whatever the value. Only ``peer`` writes them, so no live rank's signal is lost. A
        signal that the dead peer's last kernel still lands adds one more if it lands after the write-back, and is
        overwritten if it lands between the read and the write-back (the add is not atomic with the device's; on
        GPUs it is done on the host): either way the value ends a step or more past where it was, so every wait
        is reached. Once per peer: a second step would wrap the words back behind.
        Called from the watchdog thread."""
        if peer in self._poisoned:
            return
        self._poisoned.add(peer)
        # [slots * ROWS, world_size + 1]: the region's tail past the last whole slot is no group's (at 3 ranks the
        # region is not a multiple of a slot)
        rows = self.region[:self.slots * slot_words(self.world_size)].view(-1, self.world_size + 1)
        # (array, the peer's column or row, whether a column, the step)
        targets = [(rows, peer, True, POISON_STEP)] + [(flags, ranks.index(peer), False, PEER_FLAGS_STEP)
                                                       for flags, ranks in self._peer_flags if peer in ranks]
        if self.device.type == "cpu":
            from iris.interpreter.race import current as race  # here: a failure's path, not every import's

            with race.unheard():  # IRIS_SANITIZE=race: racy by design (above), and the run has failed already
                for array, index, column, step in targets:
                    (array[:, index] if column else array[index]).add_(step)
            return
        # A kernel spinning on the compute stream must not delay the writes, nor may a kernel that needs SMs do
        # them: device-to-host copies of the whole array, the step added on the host, and a strided host-to-device
        # copy of the peer's words back (copy engines, beside the spinning kernel), on a stream of the table's own
        # with a pinned buffer, both made at start.
        stream = self._poison_stream
        for array, index, column, step in targets:
            host = self._on_host(array)  # the pinned buffer, written back below
            item = array.element_size()
            if column:  # the peer's column: [slots * ROWS, 1] with a row pitch
                host[:, index] += step
                target, source, height, width = array[:, index], host[:, index], array.shape[0], item
            else:  # the peer's row
                host[index] += step
                target, source, height, width = array[index], host[index], 1, array.shape[1] * item
            pitch = array.stride(0) * item
            cuda_driver.copy_2d(target.data_ptr(), pitch, source.data_ptr(), pitch, width, height,
                                stream.cuda_stream, from_host=True)
            stream.synchronize()
