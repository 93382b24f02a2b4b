"""A test harness's stand-ins for the GPUs upstream Iris's examples assume, for ``scripts/run_upstream.py``.

Imported from the harness's ``sitecustomize`` (never by the library), in one of two modes
(``IRIS_UPSTREAM_CUDA_SHIM``):

``1`` (``--cuda-shim``, cpu backend): upstream's examples call ``torch.cuda.set_device`` and make tensors on
``"cuda"``, which raise before any iris code runs. Here ``torch.cuda.*`` answers as one device with 4
multiprocessors (a small persistent grid: the interpreter runs each program in turn), streams and events run in
order, a ``TorchFunctionMode`` moves ``device="cuda[:i]"`` / ``.to("cuda")`` / ``.cuda()`` to the CPU, and
``init_process_group("nccl", device_id=cuda:i)`` becomes gloo with no device, so the examples' iris calls run in
the interpreter and their checks test iris's data. ``torch.cuda.is_available()`` stays False: iris keeps its cpu backend.
``tl.assume(cond)`` is taken as the GPU compiler takes it, a hint that is not checked: Triton 3.6's interpreter
asserts it (``InterpreterBuilder.create_assume``: "Assume failed"), and upstream's GEMM kernels in examples 09, 10
and 14 assume ``pid_m > 0``, false for the first row of tiles (an upstream bug; on a GPU a false assumption is
undefined behaviour the compiler does not check, usually harmless). Only in this mode, for upstream's unchanged
kernels: the library and its tests keep the interpreter's check. ``IRIS_UPSTREAM_SMS`` (default 4) sets the
multiprocessor count: examples 11 and 12 give the GEMM the largest power of two at most it and the communication
the rest, none at 4.

``shared`` (ranks sharing one GPU, ``IRIS_BACKEND=simulation``): rank ``r``'s ``cuda:r`` and
``get_device_properties(r)`` name device ``r % device_count``, the stand-in for a machine with a GPU a rank.
"""

import contextlib
import os
import types

import torch
import torch.distributed as dist
from torch.overrides import TorchFunctionMode

_CPU = torch.device("cpu")


def _cpu(device):
    if isinstance(device, str) and device.startswith("cuda"):
        return _CPU
    if isinstance(device, torch.device) and device.type == "cuda":
        return _CPU
    return device


class _Rewrite(TorchFunctionMode):
    """Rewrites the device of every torch call (``device=``, ``Tensor.to(device)``, ``Tensor.cuda(index)``)."""

    def __init__(self, rewrite, keep_ints=False):
        super().__init__()
        self.rewrite, self.keep_ints = rewrite, keep_ints

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if "device" in kwargs:
            kwargs["device"] = self.rewrite(kwargs["device"])
        if func is torch.Tensor.cuda:
            if not self.keep_ints:
                return args[0]
            args = args[:1] + tuple(self.rewrite(a) for a in args[1:])
        elif func is torch.Tensor.to:
            args = args[:1] + tuple(self.rewrite(a) if isinstance(a, (str, torch.device)) else a for a in args[1:])
        return func(*args, **kwargs)


class _Stream:
    def __init__(self, *args, **kwargs):
        pass

    def synchronize(self):
        pass

    def wait_stream(self, other):
        pass


class _Event:
    def __init__(self, *args, **kwargs):
        self._t = 0.0

    def record(self, *args):
        import time

        self._t = time.perf_counter()

    def synchronize(self):
        pass

    def elapsed_time(self, other):
        return (other._t - self._t) * 1e3


def _properties(device=None):
    return types.SimpleNamespace(multi_processor_count=int(os.environ.get("IRIS_UPSTREAM_SMS", "4")),
                                 name="cpu (upstream cuda shim)", total_memory=1 << 34)


def _assume_unchecked():
    """``tl.assume`` as a compiler hint: the interpreter's builder no longer asserts the condition."""
    from triton.runtime import interpreter

    interpreter.InterpreterBuilder.create_assume = lambda self, condition: None


def _hide_from_race_reports():
    """Under ``IRIS_SANITIZE=race`` a report names the innermost frame outside iris, Triton, torch and numpy; every
    torch call of an example passes through ``_Rewrite.__torch_function__`` here, which would be that frame for
    every host access (the line of this file that calls ``func``, where the example's check reads its output).
    ``IRIS_RACE_HIDE`` has the detector skip this file too, so a report names the example's own line, as it would on
    a GPU with no stand-in."""
    hidden = [p for p in os.environ.get("IRIS_RACE_HIDE", "").split(os.pathsep) if p]
    os.environ["IRIS_RACE_HIDE"] = os.pathsep.join(hidden + [os.path.abspath(__file__)])


def _install_cpu():
    torch.cuda.set_device = lambda device: None
    torch.cuda.synchronize = lambda *args, **kwargs: None
    torch.cuda.current_device = lambda: 0
    torch.cuda.device_count = lambda: 1
    torch.cuda.get_device_properties = _properties
    torch.cuda.Stream = _Stream
    torch.cuda.Event = _Event
    torch.cuda.stream = lambda stream=None: contextlib.nullcontext()
    torch.cuda.current_stream = lambda device=None: _Stream()
    set_default_device = torch.set_default_device
    torch.set_default_device = lambda device: set_default_device(_cpu(device))
    init = dist.init_process_group

    def init_process_group(backend=None, *args, **kwargs):
        if _cpu(kwargs.get("device_id")) is _CPU:  # a GPU to bind the group to: gloo on the CPU binds none
            del kwargs["device_id"]
        return init("gloo" if backend in ("nccl", "cuda:nccl") else backend, *args, **kwargs)

    dist.init_process_group = init_process_group
    _assume_unchecked()
    _hide_from_race_reports()
    _Rewrite(_cpu).__enter__()
    # Heap tensors live on the heap's device; the examples name it "cuda", which is the CPU here.
    import iris.host.memory.creation as creation  # where the factories look it up (iris.tensor_creation aliases it)

    check = creation.throw_if_invalid_device
    creation.throw_if_invalid_device = lambda device, *args: check(_cpu(device), *args)


def _install_shared_gpu():
    """Ranks sharing fewer GPUs than there are ranks: ``cuda:r`` names device ``r % device_count``."""
    count = torch.cuda.device_count()
    if not count or count >= int(os.environ.get("WORLD_SIZE", "1")):
        return

    def shared(device):
        if isinstance(device, int) and not isinstance(device, bool):
            return device % count
        if isinstance(device, str) and device.startswith("cuda:"):
            return f"cuda:{int(device[5:]) % count}"
        if isinstance(device, torch.device) and device.type == "cuda" and device.index is not None:
            return torch.device("cuda", device.index % count)
        return device

    properties = torch.cuda.get_device_properties
    torch.cuda.get_device_properties = lambda device=None: properties(shared(device) if device is not None else None)
    _Rewrite(shared, keep_ints=True).__enter__()


if os.environ.get("IRIS_UPSTREAM_CUDA_SHIM") == "1":
    _install_cpu()
elif os.environ.get("IRIS_UPSTREAM_CUDA_SHIM") == "shared":
    _install_shared_gpu()
