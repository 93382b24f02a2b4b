"""Workspaces: heap buffers and flags the collectives and fused ops keep between calls (``ctx.workspaces``).

One buffer per (name, group), viewed at whatever shape and dtype a call asks for and grown (to a power of two of
bytes) when a call asks for more, so a server whose batch size varies holds one buffer per name, not one per
shape. Where the memory comes from keeps every rank's heap in step:

- the whole world's workspaces come from the heap's allocator: every rank makes the same world calls in the same
  order, so their first use and each growth are collective allocations like any other;
- a subgroup's come from the workspace area (``iris/host/memory/heap.py``), which the world allocator never touches: a
  subgroup's calls run on its members only, and heap allocations there would leave members and non-members at
  different offsets from then on. The members agree on an offset free on all of them (one exchange of their
  free lists through the store) only when a workspace is made or grows; calls that fit reuse it and exchange
  nothing.

Flag arrays are zeroed whenever they are made or handed out at a new shape, before the kernel whose opening
barrier keeps peers from writing them, so no waiter can read a stamp of an earlier call or layout as new.
A subgroup's workspaces, and its sync flags' slot (``iris/host/groups.py``), are freed with its last
``ProcessGroup`` of those ranks: once every member's collector has taken its ProcessGroups, at the heap's next
agreement (``iris/host/memory/heap.py``), so all members free them at the same point of their calls (freeing where the
collector runs would let one member make a workspace again, and wait for an agreement, while another still had
it). ``release(group)`` frees them now, on each member.
"""

import collections
import functools
import weakref

import torch
import torch.distributed as dist
import triton

from iris.platform import capture
from iris.host.memory.allocator import OffsetAllocator, best_fit, common_free
from iris.host.memory.heap import format_bytes

MIN_BYTES = 256


class Workspaces:
    def __init__(self, ctx, exchange):
        self.ctx = ctx
        self._exchange = exchange  # a StoreExchange (iris/host/distributed.py) of the context's ranks
        self.buffers = {}  # (name, ranks) -> uint8 tensor: the whole buffer
        self._shapes = {}  # (name, ranks) -> (shape, dtype) of the last view handed out (zeroed buffers)
        self._registered = {}  # (name, ranks) -> the flag view registered with the group table for poisoning
        self._area = OffsetAllocator(*ctx.heap.workspace_range)
        self._offsets = {}  # (name, ranks) -> offset in the workspace area (subgroups)
        self._rounds = {}  # ranks -> agreements made by this group
        self._watched = {}  # ranks -> how many live ProcessGroups of those ranks
        self._gone = collections.deque()  # ranks whose last ProcessGroup was collected (appended by finalizers)
        self._gone_here = set()  # those, waiting for every member to report the same
        # (name, ranks) -> a number new whenever its buffer is made, grown or dropped, or a zeroed view of it is
        # handed out at a new shape: a launch remembered with views of buffers (the fused ops') is taken again only
        # while theirs are unchanged (``stamp``)
        self._stamps = {}
        self._clock = 0
        ctx.heap.ride("workspaces.gone", self._report_gone, self._release_agreed)

    def get(self, name, ranks, shape, dtype, zero=False):
        """The buffer ``name`` of the group of ``ranks``, viewed as ``shape`` x ``dtype``. With ``zero`` it is
        zeroed when made and whenever the shape or dtype differs from the last call's (counters and flags that
        a call leaves at zero stay as they are between calls of one shape)."""
        self.ctx.check_open("workspaces.get")
        key = (name, tuple(ranks))
        nbytes = torch.Size(shape).numel() * dtype.itemsize
        buffer = self.buffers.get(key)
        made = buffer is None or buffer.numel() < nbytes
        if made:
            buffer = self._make(key, nbytes)
        view = buffer[:nbytes].view(dtype).view(shape)
        if zero and (made or self._shapes.get(key) != (tuple(shape), dtype)):
            view.zero_()
            self._shapes[key] = (tuple(shape), dtype)
            self._touch(key)
        return view

    def peer_flags(self, name, ranks, width, stable=False):
        """Zeroed int32 flags [len(ranks), width] whose row i only member ``ranks[i]`` advances, registered with
        the group table so that a failed member's row is released (``GroupTable.poison``). With ``stable`` the
        width is the buffer's (a power of two, at least ``width``) and the layout lasts until the buffer grows:
        for flags stamped with counts that differ between flags, where a stamp left at one layout could be read
        at another."""
        rows = len(ranks)
        if stable:
            last = self._shapes.get((name, tuple(ranks)))
            width = last[0][1] if last is not None and last[0][1] >= width else triton.next_power_of_2(width)
        flags = self.get(name, ranks, (rows, width), torch.int32, zero=True)
        key = (name, tuple(ranks))
        registered = self._registered.get(key)
        if registered is None or registered.shape != flags.shape or registered.data_ptr() != flags.data_ptr():
            self._unregister(key)
            self.ctx.groups.register_peer_flags(flags, list(ranks))
            self._registered[key] = flags
        return flags

    def stamp(self, names, ranks):
        """What the buffers ``names`` of the group of ``ranks`` (a tuple) are now: equal stamps mean the same
        buffers, handed out at the same zeroed shapes."""
        return tuple(self._stamps.get((name, ranks)) for name in names)

    def views(self, name):
        """The last view handed out of ``name``'s buffer in each group (zeroed views: flags and counters), as the
        calls left them."""
        self.ctx.check_open("workspaces.views")
        found = []
        for key, (shape, dtype) in self._shapes.items():
            if key[0] == name and key in self.buffers:
                nbytes = torch.Size(shape).numel() * dtype.itemsize
                found.append(self.buffers[key][:nbytes].view(dtype).view(shape))
        return found

    def release(self, group):
        """Free every workspace of ``group`` (a ``ProcessGroup``, or its ranks; None: the world), and a subgroup's
        sync flags. Local; the members' next call with the group makes them again. Call it on every member at
        the same point of their calls, once no call with the group is in flight on any member (after
        ``ctx.barrier(group=group)``)."""
        self.ctx.check_open("Iris.workspaces.release")
        if group is None or isinstance(group, (list, tuple)):
            ranks = tuple(range(self.ctx.num_ranks)) if group is None else tuple(sorted(group))
        else:
            ranks = tuple(self.ctx.group_ranks(group, "Iris.workspaces.release"))
        for key in [k for k in self.buffers if k[1] == ranks]:
            self._drop(key)
            self._shapes.pop(key, None)
        self.ctx.groups.release(ranks)

    def bytes(self):
        """Bytes held by workspaces, whole-world ones (heap) and subgroup ones (workspace area)."""
        self.ctx.check_open("workspaces.bytes")
        world = tuple(range(self.ctx.num_ranks))
        heap = sum(b.numel() for k, b in self.buffers.items() if k[1] == world)
        return {"heap": heap, "area": self._area.used_bytes}

    # ------------------------------------------------------------------ internals
    def _make(self, key, nbytes):
        size = max(MIN_BYTES, triton.next_power_of_2(nbytes))
        world = list(key[1]) == list(range(self.ctx.num_ranks))
        graph = capture.current(self.ctx.get_device())
        if graph is not None:
            if not world:  # the members' agreement on an offset is not recorded by a capture
                raise RuntimeError(
                    f"Iris.workspaces: the group {list(key[1])} needs its {key[0]!r} workspace made or grown to {size} "
                    "bytes during a CUDA graph capture; run the call once at this size (or larger) before capturing")
            if key in self.buffers:  # kernels captured before the growth keep using the old buffer on replay
                self.ctx.heap.hold(self.buffers[key], graph)
        self._drop(key)
        if world:
            buffer = self.ctx.heap.allocate_tensor((size,), torch.uint8, f"workspace {key[0]}")
        else:
            offset = self._agree_offset(key, size)
            self._offsets[key] = offset
            self.watch(key[1])
            buffer = self.ctx.heap.view(offset, size)
        self.buffers[key] = buffer
        return buffer

    def _drop(self, key):
        self._touch(key)
        self._unregister(key)
        if self.buffers.pop(key, None) is not None and key in self._offsets:
            self._area.release(self._offsets.pop(key))
        # a whole-world buffer returns its bytes through the heap's agreed frees once the last view goes

    def _touch(self, key):
        self._clock += 1
        self._stamps[key] = self._clock

    def _unregister(self, key):
        flags = self._registered.pop(key, None)
        if flags is not None:  # poisoning must not write into bytes that may be handed out again
            self.ctx.groups.unregister_peer_flags(flags)

    def _report_gone(self):
        while self._gone:  # finalizers only queue: the garbage collector may run them anywhere
            self._gone_here.add(self._gone.popleft())
        return sorted(self._gone_here)

    def _release_agreed(self, everyone):
        """At a heap agreement: free the groups whose every member reported its ProcessGroups gone."""
        reported = [set(map(tuple, r or ())) for r in everyone]
        for ranks in sorted(self._gone_here):
            if all(ranks in reported[r] for r in ranks):
                self._gone_here.discard(ranks)
                self.release(list(ranks))

    def watch(self, ranks):
        """Queue ``ranks`` for release once every ProcessGroup of exactly those ranks is collected (nothing to
        watch where none exists: pairs of ``send``/``recv``, whose slots are set aside for them)."""
        self.ctx.check_open("workspaces.watch")
        if ranks in self._watched:
            return
        groups = [g for g, members in dist.distributed_c10d._world.pg_group_ranks.items()
                  if tuple(sorted(members)) == ranks]
        if not groups:
            return
        self._watched[ranks] = len(groups)
        for group in groups:
            # through a weak reference: a ProcessGroup that outlives the context (torch keeps every group it made
            # until destroy_process_group) must not keep the context, and its heap mappings, alive
            weakref.finalize(group, _group_gone, weakref.ref(self), ranks)

    def _group_gone(self, ranks):
        self._watched[ranks] -= 1
        if self._watched[ranks] == 0:
            del self._watched[ranks]
            self._gone.append(ranks)

    def _agree_offset(self, key, size):
        """Collective over the members ``key[1]``: an offset of the workspace area free on every member (best
        fit in the ranges free on all of them), reserved on each. One exchange through the store."""
        ranks = key[1]
        ctx = self.ctx
        agreement = self._rounds[ranks] = self._rounds.get(ranks, 0) + 1
        check = functools.partial(ctx.groups.check, "Iris.workspaces")
        free_lists = self._exchange(ranks, self._area.free_ranges(), check, round=agreement)
        offset = best_fit(common_free(free_lists), size)
        if offset is None:
            first, end = ctx.heap.workspace_range
            raise MemoryError(
                f"Iris.workspaces: the group {list(ranks)} needs {size} bytes ({format_bytes(size)}) for {key[0]!r} "
                f"but its members' workspace areas of {end - first} bytes have no range that large free on all "
                f"of them; pass a larger workspace_size to iris.iris(), or release unused groups' workspaces "
                f"(ctx.workspaces.release(group))")
        self._area.take(offset, size)
        return offset


def _group_gone(workspaces, ranks):
    workspaces = workspaces()
    if workspaces is not None:
        workspaces._group_gone(ranks)
