"""A test harness's stand-in for CUDA on a machine without a GPU, for ``run_upstream.py --cuda-shim``.

Upstream Iris's examples call ``torch.cuda.set_device``, ``torch.cuda.synchronize`` and make tensors on
``"cuda"``; on the cpu backend those raise before any iris code runs. Imported from the harness's
``sitecustomize`` (never by the library), this module makes those calls land on the CPU so the iris names and
meanings an example uses are exercised by the interpreter:

- ``torch.cuda.set_device / synchronize / current_device / device_count / get_device_properties`` answer as one
  device with 4 multiprocessors (a small persistent grid: the interpreter runs each program in turn);
- ``torch.cuda.Stream`` / ``torch.cuda.stream`` / ``torch.cuda.Event`` are stand-ins that run in order;
- a ``TorchFunctionMode`` rewrites ``device="cuda[:i]"`` to the CPU, and ``Tensor.cuda()`` / ``.to("cuda")``
  to no-ops;
- ``dist.init_process_group("nccl")`` becomes gloo.

``torch.cuda.is_available()`` stays False, so iris itself keeps its cpu backend. What an example measures under
the shim says nothing about GPU speed; what it validates is iris's data.
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
    if isinstance(device, int) and not isinstance(device, bool):
        return _CPU
    return device


class _CudaToCpu(TorchFunctionMode):
    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if "device" in kwargs:
            kwargs["device"] = _cpu(kwargs["device"])
        if func is torch.Tensor.cuda:
            return args[0]
        if func is torch.Tensor.to:
            args = tuple(_cpu(a) if isinstance(a, (str, torch.device)) else a for a in args)
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
    return types.SimpleNamespace(multi_processor_count=4, name="cpu (upstream cuda shim)", total_memory=1 << 34)


torch.cuda.set_device = lambda device: None
torch.cuda.synchronize = lambda *args, **kwargs: None
torch.cuda.current_device = lambda: 0
torch.cuda.device_count = lambda: 1
torch.cuda.get_device_properties = _properties
torch.cuda.Stream = _Stream
torch.cuda.Event = _Event
torch.cuda.stream = lambda stream=None: contextlib.nullcontext()
torch.cuda.current_stream = lambda device=None: _Stream()

_set_default_device = torch.set_default_device
torch.set_default_device = lambda device: _set_default_device(_cpu(device))

_init = dist.init_process_group


def _init_process_group(backend=None, *args, **kwargs):
    return _init("gloo" if backend in ("nccl", "cuda:nccl") else backend, *args, **kwargs)


dist.init_process_group = _init_process_group

if os.environ.get("IRIS_UPSTREAM_CUDA_SHIM") == "1":
    _CudaToCpu().__enter__()

    # Heap tensors live on the heap's device; the examples name it "cuda", which is the CPU here.
    import iris.tensor_creation as _creation

    _check = _creation.throw_if_invalid_device
    _creation.throw_if_invalid_device = lambda device, *args: _check(_cpu(device), *args)
