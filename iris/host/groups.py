"""Per-group synchronisation state on the heap: the flags behind ``device_barrier`` and every collective.

Each group of ranks owns an int32 array ``flags[ROWS, world_size]`` in a region reserved at the end of the
heap. Row 0 serves ``device_barrier``; row ``1 + p`` serves program ``p`` of a collective kernel. On rank
q's heap, ``flags[row, r]`` counts how many times rank r has signalled that row to q. Counts only grow, so
no flag is ever reset and a second call can never read the first call's flag (docs/design.md section 3).

The group's array sits at an offset computed from the group's member bit mask, so every member finds it
at the same offset without an extra collective and without allocating on the heap on first use (which
only the members would do, leaving the heaps of members and non-members out of step). That costs
``2**world_size`` arrays: 2 MiB at 8 ranks. Past ``MAX_SUBGROUP_WORLD`` ranks only the whole world is a
group.

When a peer fails (``iris/host/watchdog.py``), its column of every row on our heap is set to ``POISON``, so
every wait for it completes, and from then on the table refuses to hand out sync state: every collective,
``device_barrier`` and host barrier raises ``PeerError``.
"""

from dataclasses import dataclass

import torch

from iris.host import cuda_driver
from iris.host.watchdog import PeerError

# The most programs a collective or fused kernel may use (the flag rows are sized by it): above the SM count
# of the GPUs we run on (132 on an H100/H200), so a persistent fused kernel can take every SM.
MAX_COMM_PROGRAMS = 256
ROWS = 1 + MAX_COMM_PROGRAMS
MAX_SUBGROUP_WORLD = 8
POISON = 1 << 30  # above any count a run reaches, with room for a failed peer's late increments


def region_bytes(world_size):
    subsets = 1 if world_size > MAX_SUBGROUP_WORLD else 1 << world_size
    return subsets * ROWS * world_size * 4


@dataclass
class GroupSync:
    ranks: list          # global ranks of the members, ascending
    index: int           # this rank's position in ``ranks``
    flags: torch.Tensor  # int32[ROWS, world_size] on the heap
    members: torch.Tensor  # int32[len(ranks)] on the device: ``ranks`` for kernels

    @property
    def size(self):
        return len(self.ranks)


class GroupTable:
    def __init__(self, region, world_size, rank, device):
        self.region = region.view(torch.int32).zero_()
        self.world_size = world_size
        self.rank = rank
        self.device = device
        self.failure = None  # set by the watchdog: why peers can no longer be waited for
        self._groups = {}
        self._peer_flags = []  # (int32 tensor [group size, n], group ranks): kernels' own per-peer flag rows
        self._poison_stream = self._poison_values = None
        if device.type == "cuda":
            # Made now, not when a peer fails: creating a stream while a kernel of ours spins blocked for
            # good on H200s shared by two rank processes (simulation), and so may a pinned allocation.
            self._poison_stream = torch.cuda.Stream(device)
            self._grow_poison_values(self.region.numel() // world_size)

    def check(self, caller):
        """Raise ``PeerError`` once a peer has failed: a call that waits for peers would wait forever."""
        if self.failure is not None:
            raise PeerError(f"{caller}: {self.failure}")

    def get(self, ranks, caller):
        """The sync state of the group of ``ranks`` (this rank must be one of them). First use allocates a
        small device tensor, so call once outside a CUDA graph capture before capturing. Raises
        ``PeerError`` once a peer has failed."""
        self.check(caller)
        key = tuple(ranks)
        state = self._groups.get(key)
        if state is None:
            if self.world_size > MAX_SUBGROUP_WORLD:
                if len(ranks) != self.world_size:
                    raise ValueError(f"{caller}: groups smaller than the world are supported up to "
                                     f"{MAX_SUBGROUP_WORLD} ranks, this run has {self.world_size}")
                slot = 0
            else:
                slot = sum(1 << r for r in ranks)
            size = ROWS * self.world_size
            flags = self.region[slot * size:(slot + 1) * size].view(ROWS, self.world_size)
            members = torch.tensor(ranks, dtype=torch.int32, device=self.device)
            state = self._groups[key] = GroupSync(list(ranks), ranks.index(self.rank), flags, members)
        return state

    def register_peer_flags(self, flags, ranks):
        """Have ``poison`` release waits on ``flags`` too: an int32 [len(ranks), n] heap tensor whose row i
        only group member ``ranks[i]`` advances (the fused ops' per-tile and per-block flags)."""
        self._peer_flags.append((flags, list(ranks)))
        if self._poison_values is not None:
            self._grow_poison_values(flags.shape[1])

    def _grow_poison_values(self, count):
        """Pinned host source of ``count`` or more ``POISON`` words for ``poison``'s copies."""
        if self._poison_values is None or self._poison_values.numel() < count:
            self._poison_values = torch.full((count,), POISON, dtype=torch.int32, pin_memory=True)

    def poison(self, peer):
        """Complete every wait for ``peer`` on this rank: its column of every row of every group's flags, and
        its row of every registered flag array, become ``POISON``. Only ``peer`` writes them, so no live
        rank's signal is lost. Called from the watchdog thread."""
        rows = self.region.view(-1, self.world_size)  # [subsets * ROWS, world_size]
        targets = [rows[:, peer:peer + 1]] + [flags[ranks.index(peer)].view(1, -1)
                                              for flags, ranks in self._peer_flags if peer in ranks]
        if self.device.type == "cpu":
            for target in targets:
                target.fill_(POISON)
            return
        # A kernel spinning on the compute stream must not delay the write, nor may a kernel that needs SMs
        # do it: strided host-to-device copies (a copy engine, beside the spinning kernel) from pinned memory
        # on a stream of the table's own, both made at start.
        torch.cuda.set_device(self.device)
        stream = self._poison_stream
        for target in targets:  # [height, width] int32 views with a row pitch
            height, width = target.shape
            cuda_driver.copy_2d(target.data_ptr(), target.stride(0) * 4, self._poison_values.data_ptr(), width * 4,
                                width * 4, height, stream.cuda_stream, from_host=True)
            stream.synchronize()
