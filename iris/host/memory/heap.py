"""The symmetric heap: one address range per rank, mapped by every peer, carved into tensors that free themselves.

Layout of every rank's heap (offsets, the same on every rank):

    [0, group_bytes)                          group sync flags (``iris/host/groups.py``), fixed
    [group_bytes, user_start)                 workspace area: subgroup workspaces (``iris/host/memory/workspaces.py``)
    [user_start, capacity)                    user tensors and whole-world workspaces; grows with a growable memory

Allocation is collective (every rank makes the same calls in the same order) and deterministic
(``iris/host/memory/allocator.py``), so a tensor lands at the same offset on every rank. Each tensor owns a storage of
its own whose deleter queues its offset; the ranks agree on what every one of them dropped at agreement points
that all reach at the same allocation (every ``RECLAIM_EVERY`` allocations, once the bytes allocated since the
last agreement pass the bytes then live and a quarter of the heap, and before the heap grows or gives up), so
nothing on the common path waits for a peer. Reuse is ordered like torch's caching allocator: a new tensor's first use is queued after the
dropped one's last use on this rank's stream.

During a CUDA graph capture (``iris/platform/capture.py``) nothing is agreed and nothing grows: an agreement is an
all-gather and a growth maps memory collectively, neither of which a capture can record, and bytes freed then
could go to a new tensor while captured kernels still use them. Allocations come from the bytes free when the
capture began, and the bytes of a tensor allocated during a capture are held, like torch's private graph pools,
until every graph of that capture is destroyed, dropped or not: a replay writes them. A tensor allocated
before the capture and used by the graph must stay alive while the graph replays (as with torch's allocator).
"""

import math
import weakref

import torch

from iris.errors import ClosedError
from iris.platform import capture, private
from iris.host.memory.allocator import ALIGNMENT, AgreedFrees, OffsetAllocator

# An agreement is one small all-gather: 0.44 ms over NCCL with two ranks sharing an H200 (0.70 ms on the vmem heap),
# about as much over gloo. Every 256 allocations it adds ~2 us to each; by bytes, once the bytes allocated since the
# last one pass both the bytes then live and a quarter of the heap, so dropped bytes never hold more than that.
RECLAIM_EVERY = 256
RECLAIM_MIN_BYTES = 1 << 20
# Allocation plans kept per (shape, dtype) before the table starts afresh: a few hundred bytes each; a program's
# distinct shapes number in the tens, a server's varying ones in the thousands.
PLANS = 4096


def format_bytes(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


class _Owner(weakref.ref):
    """A weak reference to one allocation's storage (a slice of the heap's base storage that no other allocation
    shares). Every view of a heap tensor holds that storage, so the reference dies with the last of them, and its
    callback queues ``offset`` for agreement."""

    __slots__ = ("offset",)


# storage[start:stop], Tensor.new(storage) and the direct CUDA constructor, looked up once (iris/platform/private.py)
_SLICE = private.storage_slicer()
_ON_STORAGE = private.tensor_maker()
_CONSTRUCT_CUDA = private.cuda_tensor_constructor()


def _alone(obj):
    return [obj]


def _base_storage(memory, base):
    """One untyped storage over this rank's whole heap (its reserved range, for a heap that grows), which every
    allocation slices. It keeps what the heap's local tensor keeps alive (the mapping, after the context closes)."""
    if not memory.growable:
        return memory.local.untyped_storage()
    storage = private.construct_storage(base, memory.device, memory.reserve_bytes)
    if storage is None:
        raise RuntimeError("iris: a heap that grows (allocator_type='vmem') needs torch's "
                           "_construct_storage_from_data_pointer; use allocator_type='torch'")
    return storage


class SymmetricHeap:
    """``size`` bytes (or more, on a growable memory) for user tensors; ``group_bytes`` for the group flags and
    ``workspace_bytes`` for subgroup workspaces before them. ``exchange`` all-gathers a picklable object over
    every rank (the agreement on frees)."""

    def __init__(self, memory, size, group_bytes, workspace_bytes, rank, world_size, exchange):
        self.memory = memory
        self.closed = False  # set by close(): the mappings are gone, nothing more is allocated
        self.size = size
        self.rank = rank
        self.world_size = world_size
        self.bases = list(memory.bases)
        self.device = memory.device
        self.reserved = memory.local[:group_bytes]  # the group sync flags
        self.workspace_range = (group_bytes, group_bytes + workspace_bytes)
        self.user_start = group_bytes + workspace_bytes
        # Alone, a rank agrees with itself: the all-gather of one is its argument.
        self._exchange = exchange if world_size > 1 else _alone
        self._allocator = OffsetAllocator(self.user_start, memory.size, binned=True)
        self._frees = AgreedFrees()
        self._allocs_since = self._bytes_since = 0
        self._live_after_agreement = 0
        self._set_reclaim_bytes()
        # our own base: ``bases`` holds the node's heaps until the context widens it to the world's
        self._base_storage = _base_storage(memory, memory.local.data_ptr())
        self._owners = {}  # offset -> _Owner of every live allocation (a weak reference must be held to call back)
        self._templates = {}  # dtype -> empty tensor on the device
        self._plans = {}  # (shape, dtype) -> (bytes, rounded bytes, template, meta): allocate_tensor's checked sizes
        self._on_grow = []
        self._on_release = []
        self._riders = {}  # name -> (local() -> picklable, apply(every rank's local())): more to agree on
        self.stats = {"num_allocs": 0, "num_frees": 0, "num_agreements": 0, "num_grows": 0,
                      "allocated_bytes.peak": 0, "reserved_bytes.peak": memory.size}

    # ------------------------------------------------------------------ sizes
    @property
    def base(self):
        return self.bases[self.rank]

    @property
    def capacity(self):
        """Bytes each rank's heap maps now (it grows on a growable memory)."""
        return self.memory.size

    @property
    def bytes_left(self):
        """The largest tensor that fits now without an agreement on frees or growth."""
        return self._allocator.largest_free()

    # ------------------------------------------------------------------ allocation
    def allocate(self, num_elements, dtype, alignment=1024, caller="heap.allocate"):
        """Collective. A 1-D tensor of ``num_elements`` ``dtype`` on the heap, starting on a multiple of
        ``alignment`` bytes (contents undefined): upstream Iris's raw heap access. Dropping every view of it
        returns its bytes. The factories (``ctx.zeros`` and the rest) go through ``allocate_tensor``."""
        if not isinstance(num_elements, int) or isinstance(num_elements, bool):
            raise TypeError(f"{caller}: num_elements must be an int, got {num_elements!r}")
        return self.allocate_tensor((num_elements,), dtype, caller, alignment)

    def allocate_tensor(self, shape, dtype, caller, alignment=ALIGNMENT):
        """Collective. A tensor of ``shape`` (a tuple of ints) and ``dtype`` viewing fresh heap bytes (contents
        undefined). The hot path of every factory: ``ctx.empty`` comes straight here.

        Per call, in one frame: the call's plan (checks, sizes and an empty tensor of the dtype, made once per shape
        and dtype), the offset (``OffsetAllocator.reserve``: a block of that size an agreement returned, else the
        best fit), a storage of the allocation's own (a slice of the base storage, so that its death, the last view
        of it gone, is this allocation's alone), the weak reference that queues its offset when it dies, and the
        tensor over the storage. torch.as_tensor on an array interface built the same thing through its generic
        path at 4.5 us an allocation on an H200 host; the slice and ``Tensor.new`` take 1.7 us on a 2-core one,
        against 1.1 us for a ``torch.empty`` there. On GPUs the tensor is made in one call with its shape
        (``private.cuda_tensor_constructor``) where torch has it."""
        plan = self._plans.get((shape, dtype)) if alignment == ALIGNMENT else None
        if plan is None:
            plan = self._plan(shape, dtype, caller, alignment)
            alignment = max(alignment, dtype.itemsize)
        nbytes, size, template, meta = plan
        if self.closed:
            raise ClosedError(caller)
        self._allocs_since += 1
        self._bytes_since += size
        offset = None
        # The common case: no agreement due, no capture, room in the free list.
        if self._allocs_since < RECLAIM_EVERY and self._bytes_since < self._reclaim_bytes and (
                capture.current(self.device) is None):
            offset = self._allocator.reserve(size, alignment)
        if offset is None:
            offset = self._place(size, nbytes, alignment, caller, shape, dtype)
        stats = self.stats
        stats["num_allocs"] += 1
        if self._allocator.used_bytes > stats["allocated_bytes.peak"]:
            stats["allocated_bytes.peak"] = self._allocator.used_bytes
        storage = _SLICE(self._base_storage, slice(offset, offset + nbytes))
        self._owners[offset] = owner = _Owner(storage, self._dropped)
        owner.offset = offset
        if meta is not None:
            return _CONSTRUCT_CUDA(meta, storage)
        tensor = _ON_STORAGE(template, storage)
        return tensor if len(shape) == 1 else tensor.view(shape)  # a view: the storage is contiguous

    def _plan(self, shape, dtype, caller, alignment):
        """``(bytes, bytes rounded to ALIGNMENT, an empty tensor of dtype on the device, the CUDA constructor's
        metadata or None)`` for an allocation of ``shape`` and ``dtype``, after the checks; kept for the next call
        when ``alignment`` is the default."""
        if type(dtype) is not torch.dtype:
            raise TypeError(f"{caller}: dtype must be a torch.dtype, got {dtype!r}")
        if shape and min(shape) < 0:
            raise ValueError(f"{caller}: negative dimension in size {tuple(shape)}")
        if alignment != ALIGNMENT and (type(alignment) is not int or alignment <= 0 or alignment & (alignment - 1)):
            raise ValueError(f"{caller}: alignment must be a power of two number of bytes, got {alignment!r}")
        nbytes = math.prod(shape) * dtype.itemsize
        template = self._templates.get(dtype)
        if template is None:
            template = self._templates[dtype] = torch.empty(0, dtype=dtype, device=self.device)
        meta = None
        if self.device.type == "cuda" and _CONSTRUCT_CUDA is not None:
            meta = {"size": tuple(shape), "stride": torch.empty(shape, device="meta").stride(), "storage_offset": 0,
                    "dtype": dtype}
        plan = (nbytes, -(-(nbytes or 1) // ALIGNMENT) * ALIGNMENT, template, meta)
        if alignment == ALIGNMENT:
            if len(self._plans) >= PLANS:
                self._plans.clear()
            self._plans[(shape, dtype)] = plan
        return plan

    def _check_open(self, caller):
        """``ClosedError`` once closed: the mappings are gone, so no answer about them holds."""
        if self.closed:
            raise ClosedError(caller)

    def _dropped(self, owner):
        """The last view of an allocation is gone (a weak reference callback: it runs wherever the garbage
        collector does, so it only does atomic operations)."""
        self._owners.pop(owner.offset, None)
        self._frees.drop(owner.offset)

    def _place(self, size, nbytes, alignment, caller, shape, dtype):
        """The offset of ``size`` bytes when the common case of ``allocate_tensor`` found none: during a capture,
        when an agreement is due, or when the free list has no room (agree, then grow, then raise)."""
        graph = capture.current(self.device)
        if graph is not None:  # no agreement, no growth (module docstring)
            offset = self._allocator.reserve(size, alignment)
            if offset is None:
                raise MemoryError(
                    f"{caller}: asked for {nbytes} bytes ({format_bytes(nbytes)}, {tuple(shape)} {dtype}) during a "
                    f"CUDA graph capture, but only {self.bytes_left} bytes of the symmetric heap are free in one "
                    "piece, and returning dropped bytes or growing the heap needs an agreement between ranks, which "
                    "a capture cannot record; allocate heap tensors (and run each collective once) before capturing, "
                    "call ctx.empty_cache() before the capture, or pass a larger heap_size to iris.iris()")
            self._frees.hold(offset, graph)
            return offset
        # Every condition below reads state that is the same on every rank, so all reach an agreement together.
        agreed = self._allocs_since >= RECLAIM_EVERY or self._bytes_since >= self._reclaim_bytes
        if agreed:
            self.reclaim()
        offset = self._allocator.reserve(size, alignment)
        if offset is None and not agreed:
            self.reclaim()
            offset = self._allocator.reserve(size, alignment)
        if offset is None and self.memory.growable:
            self._grow(size + alignment)
            offset = self._allocator.reserve(size, alignment)
        if offset is None:
            grow = "" if self.memory.growable else " or allocator_type='vmem' (a heap that grows)"
            raise MemoryError(
                f"{caller}: symmetric heap exhausted: asked for {nbytes} bytes ({format_bytes(nbytes)}, "
                f"{tuple(shape)} {dtype}) but only {self.bytes_left} bytes are left of {self.size} "
                f"({format_bytes(self.size)}) in one piece; pass a larger heap_size to iris.iris(){grow}")
        return offset

    def _set_reclaim_bytes(self):
        """The bytes allocated since the last agreement that trigger the next (``RECLAIM_EVERY``'s comment)."""
        self._reclaim_bytes = max(self._live_after_agreement, (self.memory.size - self.user_start) // 4,
                                  RECLAIM_MIN_BYTES)

    def reclaim(self, caller="heap.reclaim"):
        """Collective over every rank. Return to the free list the bytes of every tensor that every rank has
        dropped (an all-gather of the dropped offsets), but those a live CUDA graph holds. Allocation calls it on
        its own; call it (after ``gc.collect()`` if tensors sit in reference cycles) to see the freed bytes in
        ``memory_stats`` now. Not during a CUDA graph capture (module docstring)."""
        self._check_open(caller)
        if capture.current(self.device) is not None:
            raise RuntimeError(f"{caller}: called during a CUDA graph capture; returning dropped bytes is an "
                               "agreement between ranks, which a capture cannot record (and captured kernels may "
                               "still use the bytes); call it before capturing or after the capture ends")
        riders = dict(self._riders)
        if self.device.type == "cuda" and self.world_size > 1:
            # A peer's kernel queued before the agreement may still write into bytes it frees; once every rank's
            # stream is drained here and every rank has passed the all-gather, none is in flight.
            torch.cuda.current_stream(self.device).synchronize()
        agreed, extras = self._frees.agree(self._exchange, {name: local() for name, (local, _) in riders.items()})
        for name, (_, apply) in riders.items():
            apply([extra.get(name) for extra in extras])
        if self._on_release:
            blocks = [(offset, self._allocator.used[offset]) for offset in agreed]
            for callback in self._on_release:
                callback(blocks)
        self._allocator.release_many(agreed)  # ascending
        self.stats["num_frees"] += len(agreed)
        self.stats["num_agreements"] += 1
        self._allocs_since = self._bytes_since = 0
        self._live_after_agreement = self._allocator.used_bytes
        self._set_reclaim_bytes()

    def _grow(self, at_least):
        """Collective: map more memory at the end of every rank's heap (every rank comes here at the same
        allocation, since their free lists are the same). By a quarter, or by the request if more: growth
        comes only after an agreement found no room beside the bytes some rank still holds, so the heap ends a
        quarter (or one request) past them; a growth cost 1.2 ms per GiB with two ranks on one H200."""
        old = self.memory.size
        new = self.memory.round_size(max(old + old // 4, old + at_least))
        new = min(new, self.memory.reserve_bytes)
        if new <= old:
            return
        self.memory.grow(new)
        self._allocator.extend(new)
        self._set_reclaim_bytes()
        self.stats["num_grows"] += 1
        self.stats["reserved_bytes.peak"] = max(self.stats["reserved_bytes.peak"], new)
        for callback in self._on_grow:
            callback(new)

    def hold(self, tensor, graph):
        """Keep the bytes of the heap tensor ``tensor`` (one whole allocation) from reuse while ``graph.alive``
        (a ``capture.GraphLife``), dropped or not: a captured graph's kernels use them."""
        self._check_open("heap.hold")
        self._frees.hold(self.offset_of(tensor), graph)

    def ride(self, name, local, apply):
        """Agree on more at each agreement: every rank sends ``local()``, then ``apply`` gets the list of every
        rank's (None from a rank without a rider of that name). Workspaces agree here on groups gone."""
        self._check_open("heap.ride")
        self._riders[name] = (local, apply)

    def on_grow(self, callback):
        """Call ``callback(capacity)`` after each growth (the context updates the extent its kernels see)."""
        self._check_open("heap.on_grow")
        self._on_grow.append(callback)

    def on_release(self, callback):
        """Call ``callback([(offset, size), ...])`` with the blocks an agreement returns to the free list, before
        they can be handed out again (the race detector forgets their history)."""
        self._check_open("heap.on_release")
        self._on_release.append(callback)

    def allocation_at(self, offset):
        """(start, size) of the live allocation holding byte ``offset``, or None."""
        self._check_open("heap.allocation_at")
        for start, size in self._allocator.used.items():
            if start <= offset < start + size:
                return start, size
        return None

    def memory_stats(self):
        """Counters in the spirit of ``torch.cuda.memory_stats`` (bytes of this rank's heap, the same on every
        rank after an agreement)."""
        self._check_open("heap.memory_stats")
        return {
            "allocated_bytes.all.current": self._allocator.used_bytes,
            "allocated_bytes.all.peak": self.stats["allocated_bytes.peak"],
            "reserved_bytes.all.current": self.memory.size,
            "reserved_bytes.all.peak": self.stats["reserved_bytes.peak"],
            "allocation.all.current": len(self._allocator.used),
            "num_allocs": self.stats["num_allocs"],
            "num_frees": self.stats["num_frees"],
            "num_agreements": self.stats["num_agreements"],
            "num_grows": self.stats["num_grows"],
            "dropped_awaiting_peers": self._frees.count,
            "held_by_graphs": sum(holder.alive for holder in self._frees.held.values()),
            "user_bytes": self.memory.size - self.user_start,
            "workspace_area_bytes": self.workspace_range[1] - self.workspace_range[0],
        }

    # ------------------------------------------------------------------ queries
    def contains(self, tensor):
        """True when every byte ``tensor`` can address lies in this rank's heap."""
        self._check_open("heap.contains")
        if not isinstance(tensor, torch.Tensor) or tensor.device != self.device:
            return False
        if tensor.numel() == 0:  # addresses no byte (torch reports data_ptr() 0 for it)
            return True
        start = tensor.data_ptr()
        span = sum((n - 1) * abs(s) for n, s in zip(tensor.shape, tensor.stride())) + 1
        return self.base <= start and start + span * tensor.element_size() <= self.base + self.memory.size

    def holds(self, address, nbytes):
        """True when bytes [address, address + nbytes) lie in this rank's heap (a launch cache hit's check). The one
        query that answers once closed: its callers (remembered launches) refuse through the group table's check,
        and a check here would add work to every remembered call."""
        base = self.bases[self.rank]
        return base <= address and address + nbytes <= base + self.memory.size

    def offset_of(self, tensor):
        self._check_open("heap.offset_of")
        return tensor.data_ptr() - self.base

    def view(self, offset, nbytes):
        """A uint8 tensor over bytes [offset, offset + nbytes) of this rank's heap that frees nothing (the
        workspace area's buffers, which their own allocator tracks)."""
        self._check_open("heap.view")
        storage = torch._C._construct_storage_from_data_pointer(self.base + offset, self.device, nbytes)
        return torch.empty(0, dtype=torch.uint8, device=self.device).set_(storage, 0, (nbytes,), (1,))
