"""Process-group plumbing: initialisation from the environment, object exchange, a host barrier that
names the ranks that never arrived, and the context's host synchronisation (``SyncMethods``)."""

import atexit
import contextlib
import datetime
import math
import os
import pickle
import time
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from iris.errors import PeerError, RankTimeoutError
from iris.host.groups import GroupSync
from iris.logging import logger
from iris.platform import private

# The context, ``iris.Iris``, as the layers below ``iris/iris.py`` annotate a parameter that takes one (``ctx`` of the
# collectives and the providers): importing the class here would point up the layers (``tests/test_layers.py``), so
# to a type checker it is ``Any``.
Context = Any

DEFAULT_TIMEOUT_S = float(os.environ.get("IRIS_TIMEOUT_S", 300))
# Host waits on the store poll it (``store.check``, one round trip), first every 0.5 ms, backing off to every
# CHECK_INTERVAL_S, and ask between polls whether a peer has failed (``check``): with the watchdog's 0.2 s poll, a
# rank blocked in a host barrier raises PeerError within about half a second of a peer's death. A blocking
# ``store.wait`` with a short timeout would do the same but logs a warning at every timeout.
CHECK_INTERVAL_S = 0.05
# A wait this long logs who it waits for, once, well before it gives up (IRIS_TIMEOUT_S)
NOTICE_S = float(os.environ.get("IRIS_NOTICE_S", 30))
FIRST_INTERVAL_S = 0.0005


def process_group_backend(backend):
    """NCCL when each rank has a GPU of its own; gloo on the cpu backend and when ranks share GPUs
    (simulation), since NCCL refuses two ranks on one device. iris itself only exchanges handles and
    small objects through the process group, so gloo costs it nothing."""
    if backend == "cpu":
        return "gloo"
    ranks_here = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", 1)))  # on this node
    return "nccl" if backend == "cuda" and ranks_here <= torch.cuda.device_count() else "gloo"


def ensure_process_group(backend):
    """Initialise ``torch.distributed`` from the environment (torchrun, ``iris.launch``) unless the caller
    already did; returns True when this call created it."""
    if dist.is_initialized():
        return False
    pg_backend = process_group_backend(backend)
    missing = [name for name in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if name not in os.environ]
    if missing:
        raise RuntimeError(
            f"iris.iris: torch.distributed is not initialised and {', '.join(missing)} is not set; start the "
            "program with torchrun (torchrun --nproc-per-node=2 prog.py) or iris.launch(fn, world_size), or "
            "call torch.distributed.init_process_group first")
    # No device_id: a default group bound to a device makes torch ask every later group for a backend on that
    # device (new_group's splitting check), which a Python ProcessGroup such as the "iris" backend's does not have
    # ("No backend type associated with device type cuda", seen on one H200 at world size 1).
    dist.init_process_group(backend=pg_backend, timeout=datetime.timedelta(seconds=DEFAULT_TIMEOUT_S))
    atexit.register(_destroy_process_group)  # we made it, so we tear it down (torch warns otherwise)
    return True


def _destroy_process_group():
    if dist.is_initialized():
        dist.destroy_process_group()


# IRIS_SANITIZE=race: ``on_exchange(ranks)`` gives a context manager that orders what every member of ``ranks`` did
# before an exchange of values before what each does after it, as the exchange itself does (iris/host/sanitize.py
# sets it while a sanitized context is open).
on_exchange = None


def _exchanging(ranks):
    return contextlib.nullcontext() if on_exchange is None else on_exchange(tuple(ranks))


def all_gather_object(obj, group=None):
    out = [None] * dist.get_world_size(group)
    ranks = range(len(out)) if group is None else dist.get_process_group_ranks(group)
    with _exchanging(ranks):
        dist.all_gather_object(out, obj, group=group)
    return out


def wait_for_keys(store, keys, timeout_s, check=None, notice=None):
    """Wait until every key of ``keys`` is set in ``store``, calling ``check`` (which raises, e.g. ``PeerError``
    once a peer has failed) between polls, and ``notice(seconds)`` once if the wait passes ``NOTICE_S``. Raises
    ``TimeoutError`` after ``timeout_s``."""
    start = time.monotonic()
    deadline, noticed = start + timeout_s, notice is None
    interval = FIRST_INTERVAL_S
    while not store.check(keys):
        if check is not None:
            check()
        if not noticed and time.monotonic() - start >= NOTICE_S:
            noticed = True
            notice(time.monotonic() - start)
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"store keys not set after {timeout_s:g} s")
        time.sleep(min(interval, left))
        interval = min(2 * interval, CHECK_INTERVAL_S)


def store_exchange(store, prefix, rank, ranks, value, timeout_s=None, check=None):
    """Every rank of ``ranks`` passes a picklable ``value``; each gets the list of them in ``ranks``' order.
    Through the store, so any set of ranks can exchange without a process group of its own; ``prefix`` must
    be used once per set of ranks (the keys are not deleted: a few bytes each)."""
    timeout_s = DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s
    store.set(f"{prefix}/{rank}", pickle.dumps(value))
    keys = [f"{prefix}/{r}" for r in ranks]
    wait_for_keys(store, keys, timeout_s, check)
    return [pickle.loads(store.get(key)) for key in keys]


class StoreExchange:
    """``store_exchange`` for one context, called with the ranks: ``exchange(ranks, value, check)``, once per set
    of ranks (the group table's slot agreement), or once per ``(ranks, round)`` for a set of ranks that agrees
    again and again (the workspaces' offsets). Holds the store, not the context."""

    def __init__(self, store, rank, name, timeout_s=None):
        self.store, self.rank, self.prefix, self.timeout_s = store, rank, f"iris/exchange/{name}", timeout_s

    def __call__(self, ranks, value, check=None, round=None):
        key = f"{self.prefix}/{'-'.join(map(str, ranks))}" + ("" if round is None else f"/{round}")
        with _exchanging(ranks):
            return store_exchange(self.store, key, self.rank, ranks, value, self.timeout_s, check)


class StoreBarrier:
    """A barrier through the process group's key-value store.

    Unlike ``dist.barrier`` it has a deadline, and on expiry every waiting rank can say which ranks never
    arrived. Each member sets ``<prefix>/<generation>/<rank>`` and waits for the others' keys; the
    generation advances per call, so no key is ever read twice, and a rank deletes its key from the
    previous generation once everyone is past it.
    """

    def __init__(self, store, rank, ranks, name):
        self.store = store
        self.rank = rank
        self.ranks = list(ranks)
        self.prefix = f"iris/barrier/{name}"
        self.generation = 0

    def _key(self, generation, rank):
        return f"{self.prefix}/{generation}/{rank}"

    def wait(self, timeout_s=None, what="barrier", check=None, gone=None):
        """``check`` runs between short waits (``wait_for_keys``): raise from it to stop waiting. ``gone()`` gives
        ``{rank: how it left}`` for ranks that will never arrive anywhere again (closed or returned, the watchdog's
        ``gone``): one of them missing here raises ``PeerError`` naming it."""
        timeout_s = DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s
        generation = self.generation
        self.generation += 1
        self.store.set(self._key(generation, self.rank), b"1")
        keys = [self._key(generation, r) for r in self.ranks]

        def check_all():
            if check is not None:
                check()
            left = gone() if gone is not None else None
            if left:
                for rank in self.ranks:
                    if rank in left and not self._present(self._key(generation, rank)):
                        raise PeerError(f"{what}: rank {rank} {left[rank]} without arriving at this barrier (call "
                                        f"{generation} of ranks {self.ranks}), which it can no longer reach: every "
                                        "rank must make the same calls before it returns or closes its context")

        def notice(seconds):
            missing = [r for r, key in zip(self.ranks, keys) if not self._present(key)]
            logger.warning(f"{what} (call {generation} of ranks {self.ranks}): rank {self.rank} has waited "
                           f"{seconds:.0f} s for rank(s) {missing}, which have not arrived; it gives up at "
                           f"{timeout_s:g} s (IRIS_TIMEOUT_S)",
                           extra={"iris_rank": self.rank, "iris_num_ranks": dist.get_world_size()})

        try:
            wait_for_keys(self.store, keys, timeout_s, check_all, notice)
        except TimeoutError as e:
            missing = [r for r, key in zip(self.ranks, keys) if not self._present(key)]
            if not missing:
                raise
            raise RankTimeoutError(
                f"{what}: rank {self.rank} waited {timeout_s:g} s and rank(s) {missing} of {self.ranks} never "
                "arrived; check that every rank makes the same collective calls in the same order (raise the "
                "limit with IRIS_TIMEOUT_S)", missing) from e
        if generation > 0:
            self.store.delete_key(self._key(generation - 1, self.rank))

    def _present(self, key):
        try:
            return self.store.check([key])
        except Exception:
            return False


def default_store():
    return private.default_store()


def device_synchronize(device, stream=None):
    if device.type != "cuda":
        return
    if stream is not None:
        stream.synchronize()
    else:
        torch.cuda.synchronize(device)


class SyncMethods:
    """The context's host synchronisation (a part of ``Iris``): ``barrier`` and its store barrier, a group's device
    synchronisation state, and the host-side ``broadcast`` of a value. They read ``self.groups``, ``self.topology``
    and the store the context was made with."""

    def barrier(self, stream: torch.cuda.Stream | None = None, group: dist.ProcessGroup | None = None,
                timeout_s: float | None = None) -> None:
        """Collective, host-blocking. Wait for this rank's device work (``stream`` only, if given), then
        for every rank of ``group``. Raises ``iris.RankTimeoutError`` naming the ranks that did not
        arrive after ``timeout_s`` (default ``IRIS_TIMEOUT_S`` or 300 s). Not graph-capturable; use
        ``device_barrier`` inside graphs. Raises ``iris.PeerError`` once a peer has failed, or has closed its
        context or returned without arriving here; ``TypeError`` / ``ValueError`` for a ``group`` that is not a
        ``ProcessGroup`` this rank belongs to.

        Example::

            x = ctx.full((64,), float(rank))
            ctx.barrier()  # the work queued above has finished, on every rank
            assert torch.all(x == rank)
        """
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

    def group_sync(self, group: dist.ProcessGroup | None, caller: str) -> GroupSync:
        """Synchronisation state (flags on the heap, member table) of ``group`` (None: all ranks), what a kernel
        that synchronises with its peers takes (``GroupSync.args``). Collective over the group at its first use
        (the members agree on a slot of flags; the world's is fixed), local after.

        Raises ``iris.PeerError`` once a peer has failed (every collective starts here or at ``groups.get``);
        ``ValueError`` for a group that spans nodes, and ``TypeError`` / ``ValueError`` for a ``group`` that is not a
        ``ProcessGroup`` this rank belongs to.

        Example::

            sync = ctx.group_sync(None, "mylib.exchange")  # the world's
            assert sync.ranks == list(range(world_size)) and sync.index == rank and sync.size == world_size
        """
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

    def broadcast(self, value: Any, src: int = 0) -> Any:
        """Collective, host-blocking. Every rank gets ``src``'s ``value``: tensors and numpy arrays come back as
        numpy arrays of the same dtype (moved as bytes with a tensor broadcast; bfloat16 and float8, which numpy
        lacks, arrive as float32), anything else as the same Python object.

        Raises ``ValueError`` for a ``src`` outside ``[0, world_size)``, and ``iris.PeerError`` once a peer has
        failed.

        Example::

            config = ctx.broadcast({"seed": 1234} if rank == 0 else None)
            assert config == {"seed": 1234}
            row = ctx.broadcast(torch.arange(4) * rank, src=world_size - 1)  # a numpy array on every rank
            assert row.tolist() == [0, world_size - 1, 2 * (world_size - 1), 3 * (world_size - 1)]
        """
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
        # as bytes: the process group's backend moves uint8 whatever the dtype (gloo has no uint16, float8, ...)
        nbytes = math.prod(shape) * dtype.itemsize
        buffer = array.contiguous().reshape(-1).view(torch.uint8).to(device) if self.cur_rank == src else \
            torch.empty(nbytes, dtype=torch.uint8, device=device)
        if nbytes > 0:
            dist.broadcast(buffer, src=src)
        tensor = buffer.cpu().view(dtype).reshape(shape)
        try:
            return tensor.numpy()
        except TypeError:  # bfloat16 and the float8 types, which numpy lacks: float32 holds each of their values
            return tensor.float().numpy()
