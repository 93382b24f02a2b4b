"""``Iris``: the host side of one rank, composed of the rooms below it: its heap, its peers, the copy engines, the
collectives (``ctx.ccl``) and fused ops (``ctx.ops``), and PyTorch-style tensor creation on the heap.

This module is upstream Iris's ``iris.iris``: besides ``Iris`` and its factory ``iris()`` it re-exports the device API
(``from iris.iris import load``), as upstream's does. The package attribute ``iris.iris`` is the factory."""

import functools
import importlib
from collections.abc import Sequence

import torch
import torch.distributed as dist
import triton.language as tl

from iris.errors import ClosedError, RaceError
from iris.platform import backend as _backend
from iris.interpreter.triton import patch_interpreter_asserts
from iris.host import bootstrap
from iris.host.copy_engine.api import CopyEngineMethods, resolve_engines
from iris.host.distributed import StoreExchange, SyncMethods
from iris.host.memory.factories import TensorFactory
from iris.host.memory.symmetric import SymmetricMethods
from iris.host.topology import TopologyMethods
from iris.logging import RankLogger
from iris.device import (DeviceContext, atomic_add, atomic_and, atomic_cas, atomic_max, atomic_min, atomic_or,
                         atomic_sub, atomic_xchg, atomic_xor, copy, get, load, put, store, translate)

ALLOCATORS = bootstrap.ALLOCATORS


class Iris(TensorFactory, TopologyMethods, SymmetricMethods, CopyEngineMethods, SyncMethods, RankLogger):
    """One rank's view of the symmetric heap, composed of the rooms below: its parts are made by
    ``bootstrap.assemble`` (``iris/host/bootstrap.py``); its methods come from the rooms that own them
    (tensor creation ``iris/host/memory/factories.py``, ranks, nodes and devices ``iris/host/topology.py``, the heap
    ``iris/host/memory/symmetric.py``, the copy engines ``iris/host/copy_engine/api.py``, host synchronisation
    ``iris/host/distributed.py``); what is here binds the collectives and ops and ends the context's life.

    Construction is collective: every rank of the default process group must create its context with the
    same ``heap_size``. Prefer the factory ``iris.iris(...)``: the same arguments, the same errors.

    Once ``close()`` has run, every method but those ``close`` lists raises ``iris.ClosedError``; once a peer has
    raised or died, every call that waits for peers raises ``iris.PeerError`` (``iris.MismatchError`` when the ranks
    made different calls). The tensor factories (``zeros``, ``randn``, ...) raise torch's kinds: ``TypeError`` for a
    size that is not integers or a dtype that is not a ``torch.dtype``, ``RuntimeError`` for a negative dimension, a
    ``device`` other than the heap's or an ``out`` that does not fit, ``ValueError`` for a layout other than strided;
    and ``MemoryError`` when the heap has no room left.

    Example::

        # not run by the tests: it makes a context of its own, which the `with` block closes
        with iris.iris(heap_size=1 << 26) as ctx:
            x = ctx.ones(1024)
            assert ctx.is_symmetric(x) and x.device == ctx.get_device()
    """

    def __init__(self, heap_size: int = 1 << 30, allocator_type: bootstrap.Allocator = "torch",
                 engines: str | Sequence[str] = (), timeout_s: float | None = None, debug: bool | None = None,
                 workspace_size: int | None = None, copy_engine: str | None = None,
                 enable_copy_engine: bool | None = None, sanitize: str | bool | None = None) -> None:
        if debug:
            enable_debug()
        heap_size, self.allocator_type, workspace_size = bootstrap.check_options(heap_size, allocator_type,
                                                                                 workspace_size)
        self.enable_copy_engine = resolve_engines(engines, copy_engine, enable_copy_engine)
        bootstrap.assemble(self, heap_size, workspace_size, timeout_s, sanitize)
        self.barrier()
        self.watchdog.start()
        if self.copy_engines is not None:
            self.info(self.copy_engines.describe())
        self.debug(f"heap of {heap_size} bytes on {self.device} ({self.backend} backend)")

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

    # ------------------------------------------------------------------ synchronisation
    def device_barrier(self, group: dist.ProcessGroup | None = None) -> None:
        """Collective over ``group``, asynchronous for the host, graph-capturable (after a first call outside
        the capture): one single-program kernel on the current stream that returns once every member's
        kernel has arrived. Work queued before it on each member's stream (remote stores included) is
        visible to work queued after it on every member. Sys-scope release/acquire counters on the heap.

        Raises ``TypeError`` / ``ValueError`` for a ``group`` that is not a ``ProcessGroup`` this rank belongs to, and
        ``ValueError`` for one that spans nodes but is not the world.

        Example::

            x = ctx.full((64,), float(rank))  # writes queued on this rank's stream
            ctx.device_barrier()  # returns at once on GPUs; queued work after it sees every rank's x
            assert torch.all(x == rank)
        """
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

    # ------------------------------------------------------------------ lifetime
    def check_open(self, caller: str) -> None:
        """Raise ``iris.ClosedError`` naming ``caller`` once ``close()`` has run (``close``'s docstring lists what
        refuses): the first line of a method, of a library built on the context, that touches the heap.

        Example::

            ctx.check_open("mylib.exchange")  # returns: the context is open
        """
        if self._closed:
            raise ClosedError(caller)

    def close(self) -> None:
        """Release the peer mappings and tell peers this rank closed cleanly (so its exit is no failure).
        Tensors on the local heap stay valid while referenced. From then on every method of the context and of its
        rooms (``ccl``, ``ops``, ``provider``, ``tracing``, ``workspaces``, ``heap``) raises ``iris.ClosedError``,
        but those that describe the process and read no memory: ``get_rank``, ``get_num_ranks``, ``get_device``,
        ``get_device_id``, ``get_cu_count``, ``get_agreed_cu_count``, ``check_rank``, ``group_ranks``,
        ``spans_nodes``, ``check_direct``, ``init_random``, the log methods (``debug`` ... ``error``), ``close``
        itself, and ``heap.holds`` and ``workspaces.stamp``, which only remembered launches call, after their own
        check. A peer waiting
        for this rank in a collective raises ``iris.PeerError`` naming it (``iris/host/watchdog.py``).

        A second call does nothing. Raises ``iris.RaceError`` when the race detector (``sanitize="race"``) reported
        races while the context was open.

        Example::

            # not run by the tests: it would close the context the examples share
            ctx.close()
            try:
                ctx.zeros(4)
            except iris.ClosedError as e:
                assert e.caller == "Iris.zeros"
        """
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


def enable_debug() -> None:
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


def iris(heap_size: int = 1 << 30, allocator_type: bootstrap.Allocator = "torch", engines: str | Sequence[str] = (),
         *, timeout_s: float | None = None, debug: bool | None = None, workspace_size: int | None = None,
         copy_engine: str | None = None, enable_copy_engine: bool | None = None,
         sanitize: str | bool | None = None) -> Iris:
    """Create this rank's ``Iris`` context (collective) with a symmetric heap of ``heap_size`` bytes (1 GiB by
    default; every rank passes the same size). Initialises ``torch.distributed`` from the
    environment (NCCL on GPUs, gloo on the cpu backend) unless the caller already did. ``debug=True`` (or
    ``IRIS_DEBUG=1``) compiles bounds checks and bounded waits into kernels (``iris/device/debug.py``);
    ``timeout_s`` bounds host-side waits (default ``IRIS_TIMEOUT_S`` or 300 s). A watchdog thread turns a
    peer that raised or died into ``iris.PeerError`` on this rank (``iris/host/watchdog.py``; off with
    ``IRIS_WATCHDOG=0``). ``engines=("sdma",)`` (also ``"sdma"``, ``("ce",)``, ``copy_engine="sdma"``,
    ``enable_copy_engine=True`` or ``IRIS_ENABLE_COPY_ENGINE=1``) sets up this platform's copy engines for
    ``ctx.put / put_tile / put_tiles / quiet`` (``iris/host/copy_engine/api.py``). ``sanitize="race"`` (or
    ``IRIS_SANITIZE=race``) turns on the cpu backend's race detector (``iris/host/sanitize.py``).

    Raises ``ValueError`` for a ``heap_size`` or ``workspace_size`` that is not a number of bytes, an unknown
    ``allocator_type`` or copy engine, ranks that pass different heap sizes, or nodes of unequal rank counts;
    ``TypeError`` for an ``enable_copy_engine`` that is not a bool; ``RuntimeError`` when ``torch.distributed`` is
    not initialised and ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` or ``MASTER_PORT`` is not set (start the program
    with torchrun or ``iris.run``), or when a GPU backend finds no GPU.

    Example::

        # not run by the tests: it makes a second context (run it under torchrun or iris.run)
        ctx = iris.iris(1 << 30)  # 1 GiB of symmetric heap on every rank
        x = ctx.zeros(1024, dtype=torch.float16)
        assert ctx.is_symmetric(x) and x.device == ctx.get_device()
    """
    return Iris(heap_size=heap_size, allocator_type=allocator_type, engines=engines, timeout_s=timeout_s, debug=debug,
                workspace_size=workspace_size, copy_engine=copy_engine, enable_copy_engine=enable_copy_engine,
                sanitize=sanitize)


__all__ = [
    "Iris", "iris", "DeviceContext", "translate", "load", "store", "get", "put", "copy", "atomic_add", "atomic_sub",
    "atomic_xchg", "atomic_and", "atomic_or", "atomic_xor", "atomic_min", "atomic_max", "atomic_cas",
]
