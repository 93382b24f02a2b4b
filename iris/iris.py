"""``Iris``: the host side of one rank, composed of the rooms below it: its heap, its peers, the copy engines, the
collectives (``ctx.ccl``) and fused ops (``ctx.ops``), and PyTorch-style tensor creation on the heap.

This module is upstream Iris's ``iris.iris``: besides ``Iris`` and its factory ``iris()`` it re-exports the device API
(``from iris.iris import load``), as upstream's does. The package attribute ``iris.iris`` is the factory."""

import functools
import importlib
import math
import os
import sys
import weakref

import numpy as np
import torch
import torch.distributed as dist
import triton.language as tl

from iris.errors import RaceError
from iris.platform import backend as _backend
from iris.errors import ClosedError
from iris.interpreter.triton import patch_interpreter_asserts
from iris.host.distributed import StoreBarrier, StoreExchange, all_gather_object, default_store, device_synchronize
from iris.host.copy_engine.queue import CopyQueue
from iris.host.copy_engine.api import CopyEngines, disabled_error, resolve_engines
from iris.host.groups import GroupTable, region_bytes
from iris.host.memory.heap import SymmetricHeap
from iris.host.launches import LaunchCache
from iris.logging import RankLogger
from iris.spellings import accepts
from iris.device import (DeviceContext, atomic_add, atomic_and, atomic_cas, atomic_max, atomic_min, atomic_or,
                         atomic_sub, atomic_xchg, atomic_xor, copy, get, load, put, store, translate)
from iris.device.context import CONTEXT_HEADER
from iris.host.memory.factories import TensorFactory
from iris.host.memory.providers import HeapProvider, bases_table
from iris.host import bootstrap, sanitize as _sanitize, topology as _topology
from iris.host.watchdog import StoreReports, Watchdog

ALLOCATORS = bootstrap.ALLOCATORS


class Iris(TensorFactory, RankLogger):
    """One rank's view of the symmetric heap.

    Construction is collective: every rank of the default process group must create its context with the
    same ``heap_size``. Prefer the factory ``iris.iris(...)``.
    """

    def __init__(self, heap_size=1 << 30, allocator_type="torch", engines=(), timeout_s=None, debug=None,
                 workspace_size=None, copy_engine=None, enable_copy_engine=None, sanitize=None):
        if debug:
            enable_debug()
        heap_size, self.allocator_type, workspace_size = bootstrap.check_options(heap_size, allocator_type,
                                                                                 workspace_size)
        self.enable_copy_engine = resolve_engines(engines, copy_engine, enable_copy_engine)
        if self.enable_copy_engine:
            # upstream's switch: a program that set iris.device.sdma_utils.sdma_ep to None has no copy engine
            # (read where the program imported it; the library never imports the alias module)
            if getattr(sys.modules.get("iris.device.sdma_utils"), "sdma_ep", True) is None:
                raise ImportError("iris.iris: the copy engine was asked for but iris.device.sdma_utils.sdma_ep is None "
                                  "(upstream: the iris[sdma] extra); leave sdma_utils.sdma_ep as iris sets it")
        self.backend = _backend.BACKEND
        sanitize = _sanitize.mode(sanitize, self.backend)
        self.sanitizer = None  # the race detector (iris/host/sanitize.py), made once the heap is mapped
        self.timeout_s = timeout_s
        self._closed = False
        self._device = bootstrap.bind_device(self.backend)
        self.device = str(self._device)  # upstream Iris's string, "cuda:N" or "cpu"; get_device() is the torch.device
        self.cur_rank, self.num_ranks = dist.get_rank(), dist.get_world_size()
        self._serial = bootstrap.next_serial()  # names this context's keys in the store
        self._store = default_store()
        self._barriers = {}
        # Where the torch integrations (iris.distributed's staging, iris.compile's world) keep their state for this
        # context, by name: it lives and goes with the context.
        self.integrations = {}

        agreed = bootstrap.agree(heap_size, self._device, self.get_cu_count())
        self.init_random(agreed.seed)  # one stream on every rank (iris/host/memory/factories.py)
        self._agreed_cu_count, self.shares_gpu, self.peer_devices = agreed.cu_count, agreed.shares_gpu, \
            agreed.peer_devices
        self.topology = _topology.discover(self.cur_rank, self.num_ranks, all_gather_object)
        plumbing = bootstrap.node_plumbing(self.topology, self.backend, self._host_barrier)
        self.node_group, self.rail_group, self.rail_engine = plumbing.node_group, plumbing.rail_group, \
            plumbing.rail_engine
        group_bytes, workspace_bytes, total = bootstrap.heap_layout(heap_size, workspace_size,
                                                                    region_bytes(self.num_ranks))
        memory = bootstrap.make_memory(self.allocator_type, total, self._device, self.topology, plumbing)
        bootstrap.check_bases(memory, self.topology)
        self.heap = SymmetricHeap(memory, heap_size, group_bytes, workspace_bytes, self.cur_rank, self.num_ranks,
                                  all_gather_object)
        self.heap.bases = self.topology.world_bases(memory.bases)
        if sanitize == "race":  # before the rooms below: the copy lanes ask for it
            self.sanitizer = _sanitize.RaceSanitizer(self.heap, self.cur_rank, self.num_ranks, all_gather_object,
                                                     self._host_barrier)
        self.groups = GroupTable(self.heap.reserved, self.num_ranks, self.cur_rank, self._device,
                                 StoreExchange(self._store, self.cur_rank, self._serial, timeout_s))
        # A subgroup's slot comes back when its ProcessGroups go. Through a weak reference: the watchdog thread
        # holds the table, and a strong one would keep the context (and its heap mappings) from being collected.
        context = weakref.ref(self)
        self.groups.on_agreed(lambda ranks: context()._watch_group(ranks))
        self.copy_queue = CopyQueue(self)  # the ops' copy-engine path (iris/host/copy_engine/queue.py)
        self.launches = LaunchCache(self.groups)  # eager calls' remembered launches (iris/host/launches.py)
        self.watchdog = Watchdog(self.cur_rank, self.num_ranks, plumbing.exchange, plumbing.local_barrier,
                                 self.groups, self.topology, StoreReports(self._store, f"iris/watchdog/{self._serial}"))
        # Upstream Iris's layout, [rank, world_size, base_0, ..., tracing words], then the bytes each base addresses
        # (debug mode's extent, iris/device/debug.py). heap_bases is a view of the bases; the words around it stay
        # in reach of the kernels that get it. A rank on another node has a negative code for a base.
        self._device_context = torch.tensor(bases_table(self.cur_rank, self.num_ranks, self.heap.bases, memory.size),
                                            dtype=torch.int64, device=self._device)
        self.heap_bases = self._device_context[CONTEXT_HEADER.value:CONTEXT_HEADER.value + self.num_ranks]
        # Growth keeps every base (the ranges are reserved up front) and widens the extent debug mode checks.
        self.heap.on_grow(lambda capacity: self._device_context[-1].fill_(capacity))
        # upstream's host copy-engine methods (iris/host/copy_engine/api.py); None when off
        self.copy_engines = CopyEngines(self) if self.enable_copy_engine else None
        self.barrier()
        self.watchdog.start()
        if self.copy_engines is not None:
            self.info(self.copy_engines.describe())
        self.debug(f"heap of {heap_size} bytes on {self.device} ({self.backend} backend)")

    # ------------------------------------------------------------------ identity
    def get_rank(self):
        """This process's rank in the default process group."""
        return self.cur_rank

    def get_num_ranks(self):
        """Number of ranks (the world size)."""
        return self.num_ranks

    def get_device(self):
        """The ``torch.device`` that holds this rank's heap (``cpu`` on the cpu backend)."""
        return self._device

    def get_device_id(self):
        """The GPU index of this rank (several ranks share one in simulation mode); 0 on the cpu backend."""
        return self._device.index if self._device.type == "cuda" else 0

    # ------------------------------------------------------------------ topology (iris/host/topology.py)
    @property
    def num_nodes(self):
        """Nodes in the job: sets of ranks whose heaps map into one another (``IRIS_NODE_ID`` or the host name)."""
        return self.topology.num_nodes

    @property
    def node(self):
        """This rank's node, in ``[0, num_nodes)``; node n holds ranks ``[n * L, (n + 1) * L)``."""
        return self.topology.node

    @property
    def local_rank(self):
        """This rank's position in its node (``rank % local_world_size``)."""
        return self.topology.local_rank

    @property
    def local_world_size(self):
        """Ranks per node, ``L``: the same on every node."""
        return self.topology.local_world_size

    @property
    def direct(self):
        """Per rank: whether device code can reach its heap by load/store (same node), upstream's ``direct``."""
        return self.topology.direct

    def spans_nodes(self, group, caller):
        """Whether ``group`` (None: the world) holds ranks of several nodes; such a group must be the world, which
        the collectives run hierarchically (``iris/ccl/multinode/hierarchical.py``)."""
        ranks = self.group_ranks(group, caller)
        if not self.topology.spans_nodes(ranks):
            return False
        if len(ranks) != self.num_ranks:
            nodes = sorted({self.topology.node_of(r) for r in ranks})
            raise ValueError(f"{caller}: the group {ranks} spans nodes {nodes} but is not the world; across nodes "
                             "the collectives run on the whole world; use a group within one node, or "
                             "torch.distributed on a group of the NCCL/gloo backend")
        return True

    def check_direct(self, peer, caller, name="peer"):
        """Raise at once when ``peer``'s heap is not mapped here (another node): host calls taking a peer rank."""
        self.check_rank(peer, caller, name)
        if not self.topology.direct[peer]:
            raise ValueError(f"{caller}: {name}={peer} is on node {self.topology.node_of(peer)} and rank "
                             f"{self.cur_rank} on node {self.node}; heaps are mapped within a node only, so only "
                             f"ranks {self.topology.node_ranks()} can be reached directly; move data between nodes "
                             "with the collectives (ctx.ccl) or torch.distributed")
        return peer

    def get_cu_count(self):
        """Streaming multiprocessors of this rank's GPU (the CPU count on the cpu backend)."""
        if self._device.type == "cuda":
            return torch.cuda.get_device_properties(self._device).multi_processor_count
        return os.cpu_count()

    def get_agreed_cu_count(self):
        """The smallest ``get_cu_count()`` over the ranks, exchanged once at context creation: what a kernel whose
        programs wait for their peers' same-numbered programs sizes its grid from, so that ranks on GPUs of
        different kinds launch the same grid (and every program stays resident on each)."""
        return self._agreed_cu_count

    def get_heap_bases(self):
        """int64[world_size] on the device: entry r is where rank r's heap appears in this process.
        Pass it to kernels that call the free device functions (``iris.load``, ``iris.put``, ...)."""
        self.check_open("Iris.get_heap_bases")
        return self.heap_bases

    def get_device_context(self):
        """int64 tensor for ``iris.DeviceContext.initialize`` and Gluon's ``IrisDeviceCtx.initialize``, laid out as
        upstream Iris's: ``[rank, world_size, heap_base_0, ..., heap_base_{W-1}, trace_enabled, max_events,
        event counter address, operation counter address, 13 trace buffer addresses]`` (the tracing words are
        zero until ``tracing.enable``), then the bytes each base addresses (read by debug mode)."""
        self.check_open("Iris.get_device_context")
        return self._device_context

    def get_copy_engine_ctx(self):
        """The device-side copy-engine context to pass to device ops as ``copy_engine_ctx`` (a uint64 [world_size, 6]
        tensor, opaque), or None when the context was made without ``engines=("sdma",)``."""
        self.check_open("Iris.get_copy_engine_ctx")
        return None if self.copy_engines is None else self.copy_engines.device_ctx

    # ------------------------------------------------------------------ copy engine (iris/host/copy_engine/api.py)
    def _engines(self, method):
        self.check_open(method)
        if self.copy_engines is None:
            raise disabled_error(method)
        self.groups.check(method)
        return self.copy_engines

    @accepts(from_tensor="src_tensor", dst_rank="to_rank", to_tensor="dst_tensor")
    def put(self, src_tensor, to_rank, dst_tensor=None, wait_flag=None, wait_value=None, signal_flag=None,
            signal_value=1, async_op=False, channel=0):
        """Copy ``src_tensor`` into ``dst_tensor``'s counterpart (default: ``src_tensor``'s) on ``to_rank`` on a copy
        engine, after the work queued on the current stream and, with ``wait_flag``, once that local int32/int64
        flag reaches ``wait_value``; then add ``signal_value`` to ``signal_flag``'s counterpart on ``to_rank``
        (release: a kernel there that acquires the flag sees the data). ``async_op=False`` blocks the host until it
        has landed (the context's timeout; ``PeerError`` once a peer fails); ``async_op=True`` returns at once
        (``quiet`` waits). No SM is used for the copy; the signal is a one-thread kernel. Graph-capturable.
        ``dst_rank`` / ``to_tensor`` / ``from_tensor`` are upstream's other names (``iris/upstream.py``)."""
        self._engines("Iris.put").put(src_tensor, to_rank, dst_tensor, wait_flag, wait_value, signal_flag,
                                      signal_value, async_op, channel)

    def put_tile(self, tile, to_rank, to_ptr, to_stride, wait_flag=None, wait_value=None, signal_flag=None,
                 signal_value=1, async_op=False, channel=0):
        """Upstream's low-level 2-D put: ``tile`` (``iris.copy_engine.Tile``: a sub-window of the matrix at address
        ``tile.data``, row pitch ``tile.src_stride`` bytes) into the same window of the matrix at ``to_ptr`` (an
        address already in the peer's heap, e.g. ``iris.copy_engine.peer_address``), row pitch ``to_stride`` bytes.
        Flags as in ``put``, as tensors or raw addresses (32 bits; a raw ``signal_flag`` is already the peer's)."""
        self._engines("Iris.put_tile").put_tiles([tile], to_rank, [to_ptr], [to_stride], wait_flag, wait_value,
                                                 signal_flag, signal_value, async_op, channel, caller="Iris.put_tile")

    def put_tiles(self, tiles, to_rank, to_ptrs, to_strides, wait_flag=None, wait_value=None, signal_flag=None,
                  signal_value=1, async_op=False, channel=0):
        """``put_tile`` for a batch in one submission: one wait before the first tile, one 2-D copy per tile, one
        signal after the last."""
        self._engines("Iris.put_tiles").put_tiles(tiles, to_rank, to_ptrs, to_strides, wait_flag, wait_value,
                                                  signal_flag, signal_value, async_op, channel)

    @accepts(dst_rank="to_rank")
    def quiet(self, to_rank=None, channel=0):
        """Host-blocking: until every transfer queued to ``to_rank`` (every rank: None) on ``channel`` has landed,
        signals included; the context's timeout, ``PeerError`` once a peer fails. Inside a capture, nothing to do.
        ``dst_rank`` is upstream's other name (``iris/upstream.py``)."""
        self._engines("Iris.quiet").quiet(to_rank, channel)

    @property
    def failure(self):
        """None, or why this context stopped waiting for peers: a peer raised or died (``iris.PeerError``)."""
        return self.groups.failure

    # Made on first use: importing iris stays light, and a program that never calls them pays nothing.
    @functools.cached_property
    def ccl(self):
        """The collectives (``iris.ccl``) bound to this context: ``ctx.ccl.all_reduce(out, inp)``, ..."""
        from iris.ccl import CCL

        return CCL(self)

    @functools.cached_property
    def rail(self):
        """The inter-node stage (``iris/ccl/multinode/rail.py``): this rank's rail group, and the bytes handed to it."""
        from iris.ccl.multinode.rail import Rail

        return Rail(self)

    @functools.cached_property
    def tracing(self):
        """Device tracing (``iris/host/tracing/``): ``enable(max_events)``, ``reset()``, ``export(path)``."""
        from iris.host.tracing import Tracing

        return Tracing(self)

    @functools.cached_property
    def workspaces(self):
        """The heap buffers and flags the collectives and fused ops keep between calls
        (``iris/host/memory/workspaces.py``); ``ctx.workspaces.release(group)`` frees a group's."""
        from iris.host.memory.workspaces import Workspaces

        return Workspaces(self, StoreExchange(self._store, self.cur_rank, f"{self._serial}/workspaces", self.timeout_s))

    @functools.cached_property
    def ops(self):
        """The fused GEMM + communication ops (``iris.ops``) bound to this context: ``ctx.ops.matmul_all_gather``."""
        from iris.ops import Ops

        return Ops(self)

    # ------------------------------------------------------------------ heap
    def is_symmetric(self, tensor):
        """True when ``tensor`` lies entirely in this rank's symmetric heap."""
        self.check_open("Iris.is_symmetric")
        return self.heap.contains(tensor)

    def check_symmetric(self, tensor, caller, name="tensor"):
        """Raise a clear error when ``tensor`` is not on the heap (kernels would read a peer's garbage), or
        ``ClosedError`` once the context is closed."""
        self.check_open(caller)
        if not self.heap.contains(tensor):
            where = f"on {tensor.device}" if isinstance(tensor, torch.Tensor) else f"a {type(tensor).__name__}"
            raise ValueError(f"{caller}: {name} is not on the symmetric heap ({where}); allocate it with "
                             "ctx.zeros(...) / ctx.empty(...), copy it there with ctx.as_symmetric(t), or map memory "
                             "of another provider with iris.TorchSymmMemProvider or iris.wrap_symmetric")
        return tensor

    def symmetric_table(self, tensor, caller, name="tensor"):
        """The bases table kernels translate ``tensor`` with: ``heap_bases`` for a heap tensor; for memory of another
        provider (``TorchSymmMemProvider``, ``wrap_symmetric``), the ``peer_bases`` of the live map whose allocation
        holds it, which must span the whole world in rank order. Anything else raises ``check_symmetric``'s error."""
        self.check_open(caller)
        if self.heap.contains(tensor) or not isinstance(tensor, torch.Tensor):
            self.check_symmetric(tensor, caller, name)
            return self.heap_bases
        from iris.host.memory.providers import find

        address = find(tensor)
        if address is None:
            self.check_symmetric(tensor, caller, name)
        if address.world_size != self.num_ranks or address.local_rank != self.cur_rank:
            raise ValueError(f"{caller}: {name} comes from a provider's allocation over {address.world_size} ranks with "
                             f"this rank at {address.local_rank}; the collectives take provider memory mapped over "
                             f"the whole world ({self.num_ranks} ranks, this one at {self.cur_rank}): make it over "
                             "the default group")
        return address.peer_bases

    def check_rank(self, rank, caller, name="rank"):
        if not isinstance(rank, int) or not 0 <= rank < self.num_ranks:
            raise ValueError(f"{caller}: {name}={rank!r} is outside [0, {self.num_ranks}); ranks run from 0 to "
                             f"world_size - 1 = {self.num_ranks - 1}")
        return rank

    def memory_stats(self):
        """This rank's heap in the spirit of ``torch.cuda.memory_stats``: ``allocated_bytes.all.current`` /
        ``.peak`` (bytes in live tensors and whole-world workspaces, including tensors dropped here but not yet
        on every rank), ``reserved_bytes.all.current`` / ``.peak`` (bytes mapped: the heap's size, which grows
        with ``allocator_type="vmem"``), counts of allocations, frees, agreements and growths, ``held_by_graphs``
        (allocations made during CUDA graph captures whose graphs live: not reused, dropped or not), and
        ``workspace_bytes`` (whole-world ones on the heap, subgroup ones in the workspace area). Local, cheap."""
        self.check_open("Iris.memory_stats")
        stats = self.heap.memory_stats()
        stats["workspace_bytes"] = self.workspaces.bytes()
        return stats

    def empty_cache(self):
        """Collective over every rank. Collect this rank's garbage (tensors in reference cycles) and return to
        the heap every tensor all ranks have dropped, and the workspaces and sync flags of every group whose
        ProcessGroups every member has dropped; ``memory_stats`` then shows what is live."""
        import gc

        self.check_open("Iris.empty_cache")
        gc.collect()
        self.heap.reclaim("Iris.empty_cache")

    def allocate_symmetric(self, *size, dtype=None):
        """Collective. An uninitialised heap tensor and int64[world_size] ``peer_bases`` on the device:
        entry r is the address of this tensor on rank r (entry ``cur_rank`` is its own ``data_ptr()``). The same
        shape as every provider's (``iris/host/memory/providers.py``), so one kernel serves them all."""
        return self.provider.allocate_symmetric(*size, dtype=dtype)

    @functools.cached_property
    def provider(self):
        """This context's heap as a symmetric-memory provider (``iris/host/memory/providers.py``):
        ``allocate_symmetric_map`` and ``symmetric_address_map(tensor)`` give a tensor's ``SymmetricAddressMap``."""
        return HeapProvider(self)

    # ------------------------------------------------------------------ synchronisation
    def group_ranks(self, group, caller):
        """The sorted ranks of ``group`` (a ``ProcessGroup``, or None for every rank); a clear error, naming
        ``caller``, when it is not a group or this rank is not in it."""
        if group is None:
            return list(range(self.num_ranks))
        if isinstance(group, int) and group == dist.GroupMember.NON_GROUP_MEMBER:  # new_group's on ranks left out
            raise ValueError(f"{caller}: rank {self.cur_rank} is not a member of the group")
        if not isinstance(group, dist.ProcessGroup):
            raise TypeError(f"{caller}: group must be a torch.distributed ProcessGroup or None, got "
                            f"{type(group).__name__}; make one with torch.distributed.new_group(ranks)")
        ranks = dist.get_process_group_ranks(group)
        if self.cur_rank not in ranks:
            raise ValueError(f"{caller}: rank {self.cur_rank} is not a member of the group {ranks}")
        return sorted(ranks)

    def barrier(self, stream=None, group=None, timeout_s=None):
        """Collective, host-blocking. Wait for this rank's device work (``stream`` only, if given), then
        for every rank of ``group``. Raises ``iris.RankTimeoutError`` naming the ranks that did not
        arrive after ``timeout_s`` (default ``IRIS_TIMEOUT_S`` or 300 s). Not graph-capturable; use
        ``device_barrier`` inside graphs. Raises ``iris.PeerError`` once a peer has failed."""
        self.groups.check("Iris.barrier")
        device_synchronize(self._device, stream)
        if self._device.type == "cpu" and stream is None and self.copy_engines is not None:
            self.copy_engines.drain("Iris.barrier")  # a GPU's synchronise waits for the copy engines' streams too
        self._host_barrier(self.group_ranks(group, "Iris.barrier"), timeout_s)

    def _host_barrier(self, ranks=None, timeout_s=None):
        """The store barrier alone: what ``barrier`` does after its checks, and the barrier of context
        creation (before ``groups`` exists)."""
        ranks = list(range(self.num_ranks)) if ranks is None else ranks
        barrier = self._barriers.get(tuple(ranks))
        if barrier is None:
            name = f"{self._serial}/{'-'.join(map(str, ranks))}"
            barrier = self._barriers[tuple(ranks)] = StoreBarrier(self._store, self.cur_rank, ranks, name)
        timeout_s = self.timeout_s if timeout_s is None else timeout_s
        watchdog = getattr(self, "watchdog", None)  # None during context creation
        gone = None if watchdog is None else watchdog.gone
        if self.sanitizer is None:
            barrier.wait(timeout_s, what="Iris.barrier", check=self._check_peers, gone=gone)
            return
        with self.sanitizer.host_barrier(ranks, barrier.generation):
            barrier.wait(timeout_s, what="Iris.barrier", check=self._check_peers, gone=gone)

    def _check_peers(self, caller="Iris.barrier"):
        """Raise ``PeerError`` once the watchdog has seen a peer fail: host waits call it between short waits."""
        groups = getattr(self, "groups", None)  # None during context creation
        if groups is not None:
            groups.check(caller)

    def _watch_group(self, ranks):
        self.workspaces.watch(ranks)

    def group_sync(self, group, caller):
        """Synchronisation state (flags on the heap, member table) of ``group`` (None: all ranks). Raises
        ``iris.PeerError`` once a peer has failed (every collective starts here or at ``groups.get``)."""
        ranks = self.group_ranks(group, caller)
        if self.topology.spans_nodes(ranks):
            nodes = sorted({self.topology.node_of(r) for r in ranks})
            raise ValueError(f"{caller}: the group {ranks} spans nodes {nodes}; iris kernels reach the ranks of one "
                             "node only; the collectives of ctx.ccl run across nodes on the whole world (group=None) "
                             "or on groups within one node")
        return self.groups.get(ranks, caller)

    @property
    def _device_barrier_state(self):
        """Upstream's view of the flags ``device_barrier`` counts on, by group (``None``: every rank): the same tensor
        at every call (upstream's tests check that it is kept)."""
        return {None: self.group_sync(None, "Iris.device_barrier").flags}

    def device_barrier(self, group=None):
        """Collective over ``group``, asynchronous for the host, graph-capturable (after a first call outside
        the capture): one single-program kernel on the current stream that returns once every member's
        kernel has arrived. Work queued before it on each member's stream (remote stores included) is
        visible to work queued after it on every member. Sys-scope release/acquire counters on the heap."""
        from iris.device.sync import _device_barrier_kernel

        if self.num_nodes > 1 and self.spans_nodes(group, "Iris.device_barrier"):  # node, rail, node (hierarchical.py)
            from iris.ccl.multinode.hierarchical import barrier

            return barrier(self)
        sync = self.group_sync(group, "Iris.device_barrier")
        _device_barrier_kernel[(1,)](sync.flags, self.heap_bases, sync.members, self.cur_rank,
                                     GROUP_SIZE=sync.size, num_warps=1)
        # Where the kernel runs synchronously (the cpu backend), a wait released by a failed peer's poison returns
        # normally if the watchdog's asynchronous PeerError was lost (Python drops one raised in a finalizer).
        self.groups.check("Iris.device_barrier", entering=False)

    def broadcast(self, value, src=0):
        """Collective, host-blocking. Every rank gets ``src``'s ``value``: tensors and numpy arrays come back
        as numpy arrays (moved with a tensor broadcast; bfloat16 arrives as float32, which numpy lacks), anything
        else as the same Python object."""
        self.groups.check("Iris.broadcast")
        self.check_rank(src, "Iris.broadcast", "src")
        header = [None]
        if self.cur_rank == src:
            if isinstance(value, (torch.Tensor, np.ndarray)):
                array = value.detach().cpu() if isinstance(value, torch.Tensor) else torch.from_numpy(
                    np.ascontiguousarray(value))
                header = [("tensor", tuple(array.shape), array.dtype)]
            else:
                header = [("object", value)]
        dist.broadcast_object_list(header, src=src)
        if header[0][0] == "object":
            return header[0][1]
        _, shape, dtype = header[0]
        device = self._device if dist.get_backend() == "nccl" else torch.device("cpu")
        buffer = array.contiguous().to(device) if self.cur_rank == src else torch.empty(shape, dtype=dtype,
                                                                                         device=device)
        if math.prod(shape) > 0:
            dist.broadcast(buffer, src=src)
        if buffer.dtype == torch.bfloat16:  # numpy has no bfloat16; float32 holds every bf16 value exactly
            buffer = buffer.float()
        return buffer.cpu().numpy()

    # ------------------------------------------------------------------ lifetime
    def check_open(self, caller):
        """Raise ``iris.ClosedError`` naming ``caller`` once ``close()`` has run (``close``'s docstring lists what
        refuses)."""
        if self._closed:
            raise ClosedError(caller)

    def close(self):
        """Release the peer mappings and tell peers this rank closed cleanly (so its exit is no failure).
        Tensors on the local heap stay valid while referenced. From then on every method of the context and of its
        rooms (``ccl``, ``ops``, ``provider``, ``tracing``, ``workspaces``, ``heap``) raises ``iris.ClosedError``,
        but those that describe the process and read no memory: ``get_rank``, ``get_num_ranks``, ``get_device``,
        ``get_device_id``, ``get_cu_count``, ``get_agreed_cu_count``, ``check_rank``, ``group_ranks``,
        ``spans_nodes``, ``check_direct``, ``init_random``, the log methods (``debug`` ... ``error``), ``close``
        itself, and ``heap.holds`` and ``workspaces.stamp``, which only remembered launches call, after their own
        check. A peer waiting
        for this rank in a collective raises ``iris.PeerError`` naming it (``iris/host/watchdog.py``)."""
        if self._closed:
            return
        self._closed = True
        # every later call refuses on the host (iris.ClosedError), before a kernel could run on unmapped memory
        self.groups.closed = self.heap.closed = True
        try:
            if self._device.type == "cuda":
                torch.cuda.synchronize(self._device)  # the watchdog still runs: a wait for a dead peer ends
        finally:
            if self.copy_engines is not None:
                self.copy_engines.proxy.close()
            self.watchdog.close()
            self.heap.memory.close()
            if self.sanitizer is not None:
                self.sanitizer.close()  # raises iris.RaceError if races were reported

    def __del__(self):
        try:
            self.close()
        except RaceError as e:  # not raised to anyone: the launcher (or the process's exit) raises it again
            self.sanitizer.reports.undeliver(len(e.races))
        except Exception:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def enable_debug():
    """Turn debug mode on for kernels compiled from now on (``iris.iris(debug=True)`` calls this): the device
    switches in ``iris/device/debug.py``, ``translate`` and ``sync``, Triton's device asserts, and the interpreter's
    on the cpu backend. A kernel compiled before keeps its mode; Triton refuses to launch it again once the switch
    has changed."""
    import triton.knobs

    from iris.device import debug

    debug.ENABLED = tl.constexpr(True)
    # By module path: ``iris.device.translate`` the attribute is the function, which shadows its module.
    for name in ("iris.device.translate", "iris.device.sync"):
        importlib.import_module(name).DEBUG = debug.ENABLED
    triton.knobs.runtime.debug = True  # device asserts are compiled only in debug builds
    if _backend.BACKEND == "cpu":
        patch_interpreter_asserts()


def iris(heap_size=1 << 30, allocator_type="torch", engines=(), **kwargs):
    """Create this rank's ``Iris`` context (collective). Initialises ``torch.distributed`` from the
    environment (NCCL on GPUs, gloo on the cpu backend) unless the caller already did. ``debug=True`` (or
    ``IRIS_DEBUG=1``) compiles bounds checks and bounded waits into kernels (``iris/device/debug.py``);
    ``timeout_s`` bounds host-side waits (default ``IRIS_TIMEOUT_S`` or 300 s). A watchdog thread turns a
    peer that raised or died into ``iris.PeerError`` on this rank (``iris/host/watchdog.py``; off with
    ``IRIS_WATCHDOG=0``). ``engines=("sdma",)`` (also ``"sdma"``, ``("ce",)``, ``copy_engine="sdma"``,
    ``enable_copy_engine=True`` or ``IRIS_ENABLE_COPY_ENGINE=1``) sets up this platform's copy engines for
    ``ctx.put / put_tile / put_tiles / quiet`` (``iris/host/copy_engine/api.py``). ``sanitize="race"`` (or
    ``IRIS_SANITIZE=race``) turns on the cpu backend's race detector (``iris/host/sanitize.py``)."""
    return Iris(heap_size=heap_size, allocator_type=allocator_type, engines=engines, **kwargs)


__all__ = [
    "Iris", "iris", "DeviceContext", "translate", "load", "store", "get", "put", "copy", "atomic_add", "atomic_sub",
    "atomic_xchg", "atomic_and", "atomic_or", "atomic_xor", "atomic_min", "atomic_max", "atomic_cas",
]
