"""The host's reads and writes of heap tensors, for the race detector: a ``TorchDispatchMode`` that sees every
aten operation this rank's main thread runs and reports the bytes of heap memory it reads (its tensor arguments)
and writes (the arguments its schema marks ``a!``: in-place operations and ``out=``). Operations that only make
views, or only read a tensor's shape (``empty_like``, ``new_empty``, ...), touch no bytes."""

import numpy as np
import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import TorchDispatchMode

from iris.interpreter.race import current

_ATEN = torch.ops.aten
# operations whose tensor arguments give a shape, a dtype or a storage, never their bytes
_NO_BYTES = {_ATEN.set_.source_Storage_storage_offset, _ATEN.set_.source_Storage, _ATEN.set_.source_Tensor,
             _ATEN.empty_like.default, _ATEN.new_empty.default, _ATEN.new_empty_strided.default,
             _ATEN.zeros_like.default, _ATEN.ones_like.default, _ATEN.full_like.default, _ATEN.rand_like.default,
             _ATEN.randn_like.default, _ATEN.new_zeros.default, _ATEN.new_ones.default, _ATEN.new_full.default,
             _ATEN.resize_.default, _ATEN.is_same_size.default, _ATEN.lift_fresh.default}
_views = {}


def _is_view(func):
    view = _views.get(func)
    if view is None:
        view = _views[func] = any(r.alias_info is not None and not r.alias_info.is_write
                                  for r in func._schema.returns)
    return view


def byte_addresses(t):
    """The local addresses of the bytes ``t`` views, for a tensor that is not contiguous."""
    size = t.element_size()
    offsets = np.zeros(1, np.int64)
    for n, stride in zip(t.shape, t.stride()):
        offsets = (offsets[:, None] + np.arange(n, dtype=np.int64) * stride * size).reshape(-1)
    return (np.uint64(t.data_ptr()) + (offsets[:, None] + np.arange(size)).reshape(-1).astype(np.uint64))


def _touch(detector, t, write):
    if t.device.type != "cpu" or t.numel() == 0 or isinstance(t, FakeTensor):  # a tracer's tensors have no bytes
        return
    start = t.data_ptr()
    shared = detector.shared
    if not int(shared.low) <= start < int(shared.high):
        return
    if t.is_contiguous():
        detector.host_range(start, start + t.numel() * t.element_size(), write, t.element_size())
    else:
        detector.host_bytes(byte_addresses(t), write, t.element_size())


def _tensors(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            if isinstance(item, torch.Tensor):
                yield item


class HeapAccesses(TorchDispatchMode):
    @classmethod
    def ignore_compile_internals(cls):
        """torch.compile traces and compiles as if the mode were not there (dynamo skips frames under a mode that
        does not say this); what a compiled graph runs through the dispatcher is still heard."""
        return True

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        detector = current.detector
        if (detector is not None and detector.current is not None and not detector.paused
                and func not in _NO_BYTES and not _is_view(func)):
            self._record(detector, func, args, kwargs)
        return func(*args, **kwargs)

    @staticmethod
    def _record(detector, func, args, kwargs):
        schema = func._schema.arguments
        if func is _ATEN.copy_.default and args[0].data_ptr() == args[1].data_ptr() and (
                args[0].stride() == args[1].stride() and args[0].dtype == args[1].dtype):
            return  # a tensor copied onto itself (the interpreter's argument copies): no byte changes
        for i, argument in enumerate(schema):
            value = args[i] if i < len(args) and not argument.kwarg_only else kwargs.get(argument.name)
            write = argument.alias_info is not None and argument.alias_info.is_write
            for t in _tensors(value):
                _touch(detector, t, write)
