"""Device queries (upstream Iris's ``iris.hip``, whose names these are), answered for this platform.

On NVIDIA a GPU is one die, so ``get_num_xcc()`` is 1 (AMD's MI300X has 8 XCDs, which upstream's kernels remap
program ids across); on the cpu backend the answers describe the host.
"""

import os

import torch

# The rate of the timer ``iris.device.utils.read_realtime`` reads, in kHz: %globaltimer counts nanoseconds.
GLOBALTIMER_KHZ = 1_000_000


def count_devices() -> int:
    """GPUs visible to this process (0 on a machine without one).

    Example::

        n = iris.hip.count_devices()
        assert n == (torch.cuda.device_count() if torch.cuda.is_available() else 0)
    """
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def set_device(device_id: int) -> None:
    """Make ``device_id`` the current GPU (a no-op without GPUs). Raises torch's errors for an index out of range.

    Example::

        iris.hip.set_device(ctx.get_device_id())  # this rank's own GPU: what iris.iris() already made current
    """
    if torch.cuda.is_available():
        torch.cuda.set_device(device_id)


def get_device_id_for_rank(local_rank: int) -> int:
    """The GPU the rank of ``local_rank`` on this node uses, as the backends assign it: the local rank modulo the
    GPUs visible (so ranks sharing one GPU under ``IRIS_BACKEND=simulation`` all get it); 0 without GPUs. Upstream
    Iris's name: ``torch.cuda.set_device(iris.get_device_id_for_rank(local_rank))``.

    Raises ``ValueError`` unless ``local_rank`` is an int >= 0.

    Example::

        device_id = iris.get_device_id_for_rank(ctx.local_rank)  # LOCAL_RANK under torchrun
        assert 0 <= device_id < max(iris.hip.count_devices(), 1)
    """
    if not isinstance(local_rank, int) or local_rank < 0:
        raise ValueError(f"iris.get_device_id_for_rank: local_rank={local_rank!r} must be an int >= 0 (torchrun's "
                         "LOCAL_RANK)")
    count = count_devices()
    return local_rank % count if count else 0


def get_cu_count(device_id: int | None = None) -> int:
    """Streaming multiprocessors of the GPU (the CPU count without GPUs); the current GPU by default.

    Example::

        sms = iris.hip.get_cu_count()  # 132 on an H100 SXM
        assert sms >= 1
    """
    if torch.cuda.is_available():
        index = torch.cuda.current_device() if device_id is None else device_id
        return torch.cuda.get_device_properties(index).multi_processor_count
    return os.cpu_count()


def get_num_xcc(device_id: int | None = None) -> int:
    """Accelerator complex dies per GPU: 1 on NVIDIA and on the cpu backend.

    Example::

        assert iris.hip.get_num_xcc() == 1  # a kernel that remaps program ids across XCDs leaves them as they are
    """
    return 1


def get_wall_clock_rate(device_id: int | None = None) -> int:
    """kHz of the timer ``iris.device.utils.read_realtime`` reads (nanoseconds here: 1e6 kHz).

    Example::

        ticks_per_us = iris.hip.get_wall_clock_rate() / 1000  # turn read_realtime differences into microseconds
        assert ticks_per_us == 1000
    """
    return GLOBALTIMER_KHZ


def get_arch(device_id: int | None = None) -> str:
    """The GPU's architecture name (``sm_90`` on H100/H200), or ``"cpu"``; the current GPU by default.

    Example::

        arch = iris.hip.get_arch()
        assert arch == "cpu" or arch.startswith("sm_")
    """
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability(device_id)
        return f"sm_{major}{minor}"
    return "cpu"


__all__ = ["count_devices", "set_device", "get_device_id_for_rank", "get_cu_count", "get_num_xcc",
           "get_wall_clock_rate", "get_arch"]
