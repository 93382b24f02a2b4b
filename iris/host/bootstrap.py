"""The named steps of making a rank's context, in the order ``assemble`` takes them for ``Iris.__init__``
(``iris/iris.py``):

    check_options      heap and workspace sizes, allocator          (local: every rank raises the same error)
    bind_device        this rank's device; torch.distributed up     (local, then the process group's rendezvous)
    agree              heap sizes, SM counts, GPUs, the random seed (one all-gather over the world)
    node_plumbing      node and rail groups, the node's exchange     (collective when there are several nodes)
    make_memory        the backing memory, mapped by the node       (collective over the node)
    check_bases        the alignment translate() assumes            (one all-gather: all raise together)

``assemble`` then makes the rooms over the heap (the race detector, the group table, the copy queue, the launch
cache, the watchdog, the device context and the copy engines) and sets them on the context. Each step is a
function of what the steps before it made; none keeps state of its own, but for the count of contexts
this process has made (``next_serial``), which names a context's keys in the store: creation is collective, so the
count is the same on every rank."""

import functools
import itertools
import os
import socket
import weakref
from typing import Literal, NamedTuple, get_args

import torch
import torch.distributed as dist

from iris.device.context import CONTEXT_HEADER
from iris.device.translate import check_base_alignment, misaligned_bases
from iris.host import sanitize as _sanitize, topology as _topology
from iris.host.copy_engine.api import CopyEngines
from iris.host.copy_engine.queue import CopyQueue
from iris.host.distributed import StoreExchange, all_gather_object, default_store, ensure_process_group
from iris.host.groups import GroupTable, region_bytes
from iris.host.launches import LaunchCache
from iris.host.memory.allocator import align_up
from iris.host.memory.backing import CudaIpcMemory, SharedMemory
from iris.host.memory.heap import SymmetricHeap
from iris.host.memory.providers import bases_table
from iris.host.memory.vmem import GrowableMemory
from iris.host.watchdog import StoreReports, Watchdog
from iris.platform import backend as _backend
from iris.platform.device_info import get_device_id_for_rank

Allocator = Literal["torch", "vmem"]
ALLOCATORS = get_args(Allocator)
_serials = itertools.count(1)


def next_serial():
    """The number of this context among the ones this process has made (the same on every rank)."""
    return next(_serials)


def _is_bytes(value):
    return isinstance(value, int) and not isinstance(value, bool)


def check_options(heap_size, allocator_type, workspace_size):
    """``(heap_size, allocator_type, workspace_size)``: a float heap size that is a whole number taken as an int,
    ``IRIS_ALLOCATOR`` applied, the default workspace (a quarter of the heap, at least 1 MiB); a ``ValueError``
    naming the argument otherwise."""
    allocator_type = os.environ.get("IRIS_ALLOCATOR", allocator_type)
    if isinstance(heap_size, float) and heap_size.is_integer():  # 1e9, 2**30 / 4: a whole number of bytes
        heap_size = int(heap_size)
    if not _is_bytes(heap_size) or heap_size <= 0:
        raise ValueError(f"iris.iris: heap_size must be a positive number of bytes, got {heap_size!r}; "
                         "for example iris.iris(heap_size=1 << 30) for 1 GiB")
    if allocator_type not in ALLOCATORS:
        raise ValueError(f"iris.iris: unknown allocator_type {allocator_type!r}; use 'torch' (default) or 'vmem'")
    if workspace_size is None:
        workspace_size = max(heap_size // 4, 1 << 20)
    if not _is_bytes(workspace_size) or workspace_size < 0:
        raise ValueError(f"iris.iris: workspace_size must be a number of bytes >= 0, got {workspace_size!r}")
    return heap_size, allocator_type, workspace_size


def bind_device(backend):
    """This rank's ``torch.device`` (made current on GPUs), with the default process group initialised: the CPU on
    the cpu backend; GPU ``LOCAL_RANK`` modulo the GPU count on ``cuda``, ``RANK`` modulo it in ``simulation``."""
    if backend == "cpu":
        ensure_process_group("cpu")
        return torch.device("cpu")
    _backend.require_gpus(backend, "iris.iris")
    local_rank = int(os.environ.get("LOCAL_RANK", os.environ.get("RANK", 0)))
    rank = int(os.environ.get("RANK", local_rank)) if backend == "simulation" else local_rank
    device = torch.device("cuda", get_device_id_for_rank(rank))
    torch.cuda.set_device(device)
    ensure_process_group(backend)
    return device


class Agreement(NamedTuple):
    """What the ranks agree on when a context is made."""
    cu_count: int  # the smallest SM count: grids launched on every rank are sized from it
    shares_gpu: bool  # more ranks than GPUs (simulation, or cuda on too few GPUs)
    peer_devices: list  # the device index of each rank on this rank's host
    seed: int  # rank 0's torch.initial_seed(): the random factories' one stream


def agree(heap_size, device, cu_count):
    """Collective over the world: one all-gather of each rank's heap size, place, SM count and torch seed."""
    place = (socket.gethostname(), device.index)
    sizes, places, cu_counts, seeds = zip(*all_gather_object((heap_size, place, cu_count, torch.initial_seed())))
    if len(set(sizes)) != 1:
        raise ValueError(f"iris.iris: ranks asked for different heap sizes {list(sizes)} (bytes, by rank); every "
                         "rank must pass the same heap_size")
    host = places[dist.get_rank()][0]
    return Agreement(min(cu_counts), device.type != "cpu" and len(set(places)) < len(places),
                     [index for name, index in places if name == host], seeds[0])


class NodePlumbing(NamedTuple):
    """The groups of a job on several nodes (None on one node), and how the node's ranks exchange and meet."""
    node_group: object
    rail_group: object
    rail_engine: object
    exchange: object  # all_gather_object over the node
    local_barrier: object  # the host barrier over the node


def node_plumbing(topology, backend, host_barrier):
    """Heaps are mapped within a node only (``iris/host/topology.py``): the node's ranks exchange handles among
    themselves. Collective over the world when the job spans nodes (it makes the node and rail groups)."""
    if topology.num_nodes == 1:
        return NodePlumbing(None, None, None, all_gather_object, host_barrier)
    node_group, rail_group, rail_engine = _topology.make_groups(topology, backend)
    return NodePlumbing(node_group, rail_group, rail_engine, functools.partial(all_gather_object, group=node_group),
                        functools.partial(host_barrier, topology.node_ranks()))


def heap_layout(heap_size, workspace_size, group_bytes):
    """``(group flags, workspace area, total)`` bytes of a heap: [group flags | subgroup workspace area | user
    tensors (grows with allocator_type="vmem")]."""
    group_bytes, workspace_bytes = align_up(group_bytes), align_up(workspace_size)
    return group_bytes, workspace_bytes, group_bytes + workspace_bytes + align_up(heap_size)


def make_memory(allocator_type, total, device, topology, plumbing):
    """The backing memory of ``total`` bytes, mapped by every rank of the node (collective over the node)."""
    local_rank, local_size = topology.local_rank, topology.local_world_size
    if allocator_type == "vmem":
        return GrowableMemory(total, device, local_rank, local_size, plumbing.exchange)
    if device.type == "cpu":
        return SharedMemory(total, local_rank, local_size, plumbing.exchange, plumbing.local_barrier)
    return CudaIpcMemory(total, device, local_rank, plumbing.exchange)


def check_bases(memory, topology):
    """translate() claims to the compiler that the bases differ by multiples of BASE_ALIGNMENT: every rank checks the
    addresses it sees (its node's) and all raise together (one rank raising alone would leave the rest in the next
    barrier). Collective over the world."""
    check_base_alignment([(seen, topology.node_ranks(topology.node_of(seen))[local], base) for seen, found in
                          enumerate(all_gather_object(misaligned_bases(memory.bases))) for local, base in found])


def assemble(ctx, heap_size, workspace_size, timeout_s, sanitize):
    """Every part of a rank's context, set on ``ctx`` (an ``Iris`` whose options are checked): the steps above, then
    the rooms over the heap. Collective over the world, as context creation is."""
    ctx.backend = _backend.BACKEND
    sanitize = _sanitize.mode(sanitize, ctx.backend)
    ctx.sanitizer = None  # the race detector (iris/host/sanitize.py), made once the heap is mapped
    ctx.timeout_s = timeout_s
    ctx._closed = False
    ctx._device = bind_device(ctx.backend)
    ctx.device = str(ctx._device)  # upstream Iris's string, "cuda:N" or "cpu"; get_device() is the torch.device
    ctx.cur_rank, ctx.num_ranks = dist.get_rank(), dist.get_world_size()
    ctx._serial = next_serial()  # names this context's keys in the store
    ctx._store = default_store()
    ctx._barriers = {}
    # Where the torch integrations (iris.distributed's staging, iris.compile's world) keep their state for this
    # context, by name: it lives and goes with the context.
    ctx.integrations = {}

    agreed = agree(heap_size, ctx._device, ctx.get_cu_count())
    ctx.init_random(agreed.seed)  # one stream on every rank (iris/host/memory/factories.py)
    ctx._agreed_cu_count, ctx.shares_gpu, ctx.peer_devices = agreed.cu_count, agreed.shares_gpu, agreed.peer_devices
    ctx.topology = _topology.discover(ctx.cur_rank, ctx.num_ranks, all_gather_object)
    plumbing = node_plumbing(ctx.topology, ctx.backend, ctx._host_barrier)
    ctx.node_group, ctx.rail_group, ctx.rail_engine = plumbing.node_group, plumbing.rail_group, plumbing.rail_engine
    group_bytes, workspace_bytes, total = heap_layout(heap_size, workspace_size, region_bytes(ctx.num_ranks))
    memory = make_memory(ctx.allocator_type, total, ctx._device, ctx.topology, plumbing)
    check_bases(memory, ctx.topology)
    ctx.heap = SymmetricHeap(memory, heap_size, group_bytes, workspace_bytes, ctx.cur_rank, ctx.num_ranks,
                             all_gather_object)
    ctx.heap.bases = ctx.topology.world_bases(memory.bases)
    if sanitize == "race":  # before the rooms below: the copy lanes ask for it
        ctx.sanitizer = _sanitize.RaceSanitizer(ctx.heap, ctx.cur_rank, ctx.num_ranks, all_gather_object,
                                                ctx._host_barrier)
    ctx.groups = GroupTable(ctx.heap.reserved, ctx.num_ranks, ctx.cur_rank, ctx._device,
                            StoreExchange(ctx._store, ctx.cur_rank, ctx._serial, timeout_s))
    # A subgroup's slot comes back when its ProcessGroups go. Through a weak reference: the watchdog thread holds
    # the table, and a strong one would keep the context (and its heap mappings) from being collected.
    context = weakref.ref(ctx)
    ctx.groups.on_agreed(lambda ranks: context()._watch_group(ranks))
    ctx.copy_queue = CopyQueue(ctx)  # the ops' copy-engine path (iris/host/copy_engine/queue.py)
    ctx.launches = LaunchCache(ctx.groups)  # eager calls' remembered launches (iris/host/launches.py)
    ctx.watchdog = Watchdog(ctx.cur_rank, ctx.num_ranks, plumbing.exchange, plumbing.local_barrier, ctx.groups,
                            ctx.topology, StoreReports(ctx._store, f"iris/watchdog/{ctx._serial}"))
    # Upstream Iris's layout, [rank, world_size, base_0, ..., tracing words], then the bytes each base addresses
    # (debug mode's extent, iris/device/debug.py). heap_bases is a view of the bases; the words around it stay in
    # reach of the kernels that get it. A rank on another node has a negative code for a base.
    ctx._device_context = torch.tensor(bases_table(ctx.cur_rank, ctx.num_ranks, ctx.heap.bases, memory.size),
                                       dtype=torch.int64, device=ctx._device)
    ctx.heap_bases = ctx._device_context[CONTEXT_HEADER.value:CONTEXT_HEADER.value + ctx.num_ranks]
    # Growth keeps every base (the ranges are reserved up front) and widens the extent debug mode checks.
    ctx.heap.on_grow(lambda capacity: ctx._device_context[-1].fill_(capacity))
    # upstream's host copy-engine methods (iris/host/copy_engine/api.py); None when off
    ctx.copy_engines = CopyEngines(ctx) if ctx.enable_copy_engine else None
