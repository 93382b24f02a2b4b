"""Process-group plumbing: initialisation from the environment, object exchange, a host barrier that
names the ranks that never arrived."""

import atexit
import datetime
import os

import torch
import torch.distributed as dist

from iris.host import private

DEFAULT_TIMEOUT_S = float(os.environ.get("IRIS_TIMEOUT_S", 300))


class RankTimeoutError(TimeoutError):
    """A host-side wait gave up; ``missing`` lists the ranks that did not arrive."""

    def __init__(self, message, missing):
        super().__init__(message)
        self.missing = missing


def process_group_backend(backend):
    """NCCL when each rank has a GPU of its own; gloo on the cpu backend and when ranks share GPUs
    (simulation), since NCCL refuses two ranks on one device. iris itself only exchanges handles and
    small objects through the process group, so gloo costs it nothing."""
    if backend == "cpu":
        return "gloo"
    world_size = int(os.environ.get("WORLD_SIZE", 1))
    return "nccl" if backend == "cuda" and world_size <= torch.cuda.device_count() else "gloo"


def ensure_process_group(backend, device=None):
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
    kwargs = {}
    if pg_backend == "nccl" and device is not None:
        kwargs["device_id"] = device
    dist.init_process_group(backend=pg_backend, timeout=datetime.timedelta(seconds=DEFAULT_TIMEOUT_S), **kwargs)
    atexit.register(_destroy_process_group)  # we made it, so we tear it down (torch warns otherwise)
    return True


def _destroy_process_group():
    if dist.is_initialized():
        dist.destroy_process_group()


def all_gather_object(obj, group=None):
    out = [None] * dist.get_world_size(group)
    dist.all_gather_object(out, obj, group=group)
    return out


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

    def wait(self, timeout_s=None, what="barrier"):
        timeout_s = DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s
        generation = self.generation
        self.generation += 1
        self.store.set(self._key(generation, self.rank), b"1")
        keys = [self._key(generation, r) for r in self.ranks]
        try:
            self.store.wait(keys, datetime.timedelta(seconds=timeout_s))
        except Exception as e:  # torch raises DistStoreError, or RuntimeError on older versions
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
