"""Tensor creation on the symmetric heap, as functions of a heap and its device.

Every factory (``ctx.zeros``, ``ctx.randn``, ..., in ``iris/host/memory/factories.py``) is ``create`` with a fill: check
the arguments, take the tensor from the heap (collective: every rank makes the same calls, so each tensor lands at
the same offset everywhere) or validate ``out=``, then fill it with the ordinary torch operation in place. The
helpers have upstream Iris's names and signatures (``parse_size``, ``is_valid_device``, ``throw_if_invalid_device``,
``apply_layout``, ``throw_if_invalid_output_tensor``, ``zeros / ones / full / zeros_like(heap, device, ...)``), so
programs that import this module run unchanged. Errors are torch's kinds: ``RuntimeError`` for a device or an
``out=`` tensor that does not fit, ``ValueError`` for a layout other than strided.
"""

import math
from collections.abc import Callable, Sequence

import torch

from iris.host.memory.heap import SymmetricHeap

_MODULE = "iris.tensor_creation"

# What the factories take, as torch's take it: a size is ints or one sequence of them (``parse_size``); a device a
# ``torch.device``, its name or a GPU index; a fill value any Python number (bool and int included).
Size = Sequence[int | Sequence[int]]
Device = torch.device | str | int
Scalar = int | float | complex


def parse_size(size: Size) -> tuple[Sequence[int], int]:
    """``(size, number of elements)`` from a factory's ``*size``: ``(2, 3)``, ``((2, 3),)``, ``([2, 3],)`` and
    ``(((2, 3),),)`` all give ``(2, 3)``; ``((),)`` is a 0-d shape of one element. A list comes back as the list."""
    while len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)):
        size = size[0]
    if not all(isinstance(d, int) and not isinstance(d, bool) for d in size):
        raise TypeError(f"{_MODULE}.parse_size: size must be integers or one tuple of integers, got {size!r}")
    return size, math.prod(size)


def _shape(size, caller):
    try:
        shape, numel = parse_size(size)
    except TypeError:
        raise TypeError(f"{caller}: size must be integers or one tuple of integers, got {size!r}") from None
    if any(d < 0 for d in shape):
        raise RuntimeError(f"{caller}: negative dimension in size {tuple(shape)}; every dimension must be >= 0")
    return tuple(shape), numel


def is_valid_device(device: Device | None, iris_device: Device) -> bool:
    """True when ``device`` names the heap's device: None, the same type and index, or the type without an
    index (``"cuda"`` means the current device, which iris sets to the rank's GPU)."""
    if device is None:
        return True
    requested, heap = torch.device(device), torch.device(iris_device)
    return requested.type == heap.type and (requested.index is None or requested.index == heap.index)


def throw_if_invalid_device(device: Device | None, iris_device: Device, caller: str = _MODULE) -> None:
    """``RuntimeError`` (torch's kind for a device mismatch) unless ``is_valid_device``."""
    if not is_valid_device(device, iris_device):
        raise RuntimeError(f"{caller}: device={device!r} but this rank's symmetric heap is on {iris_device}; heap "
                           f"tensors live on the heap's device: pass device=None or device={str(iris_device)!r}")


def _check_layout(layout, caller):
    if layout != torch.strided:
        raise ValueError(f"{caller}: layout={layout} is not supported; the symmetric heap holds dense tensors only "
                         "(layout=torch.strided)")


def apply_layout(tensor: torch.Tensor, layout: torch.layout, caller: str = _MODULE) -> torch.Tensor:
    """``tensor`` itself for ``torch.strided``; any other layout is a ``ValueError``."""
    _check_layout(layout, caller)
    return tensor


def throw_if_invalid_output_tensor(heap: SymmetricHeap, tensor: torch.Tensor, num_elements: int, dtype: torch.dtype,
                                   caller: str = _MODULE) -> None:
    """``RuntimeError`` unless ``tensor`` (an ``out=`` argument) has ``num_elements`` elements of ``dtype`` and lies
    on ``heap``: a factory writes its result into ``out`` in place, so it cannot resize, cast or move it."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{caller}: out must be a heap tensor, got {type(tensor).__name__}")
    if tensor.numel() != num_elements:
        raise RuntimeError(f"{caller}: The output tensor has {tensor.numel()} elements, but {num_elements} are "
                           "required; pass an out= of that many elements, or leave out unset")
    if tensor.dtype != dtype:
        raise RuntimeError(f"{caller}: The output tensor has dtype {tensor.dtype}, but {dtype} is required; pass "
                           f"dtype={tensor.dtype} or an out= of dtype {dtype}")
    if not heap.contains(tensor):
        raise RuntimeError(f"{caller}: The output tensor is not on the symmetric heap (on {tensor.device}); make "
                           "it with a ctx factory (ctx.empty(...)), or leave out unset")


def _strides(shape, memory_format, like, caller):
    """Strides for a dense tensor of ``shape`` in ``memory_format`` (``like`` supplies the layout that
    ``torch.preserve_format`` keeps). As upstream Iris, channels_last on a tensor that is not 4-D (channels_last_3d:
    not 5-D) falls back to contiguous where torch would refuse it."""
    if memory_format in (None, torch.contiguous_format):
        return None
    if memory_format == torch.preserve_format:
        if like is None or like.is_contiguous():
            return None
        meta = torch.empty_strided(like.shape, like.stride(), dtype=like.dtype, device="meta")
        strides = torch.empty_like(meta).stride()  # like's strides if dense, else torch's dense choice
        return None if strides == torch.empty(shape, device="meta").stride() else strides
    rank = {torch.channels_last: 4, torch.channels_last_3d: 5}.get(memory_format)
    if rank is None:
        raise ValueError(f"{caller}: memory_format={memory_format} is not a memory format; use "
                         "torch.contiguous_format, torch.channels_last, torch.channels_last_3d or torch.preserve_format")
    if len(shape) != rank:
        return None
    return torch.empty(shape, device="meta", memory_format=memory_format).stride()


def create(heap: SymmetricHeap, iris_device: Device, caller: str, size: Size, dtype: torch.dtype | None,
           fill: Callable[[torch.Tensor], object], *, out: torch.Tensor | None = None,
           device: Device | None = None, layout: torch.layout = torch.strided, requires_grad: bool = False,
           memory_format: torch.memory_format | None = None, like: torch.Tensor | None = None) -> torch.Tensor:
    """The one implementation behind every factory: a tensor of ``size`` (anything ``parse_size`` takes) and
    ``dtype`` (None: ``out``'s dtype, else torch's default), from the heap or ``out``, passed to ``fill`` in place.
    Collective when it allocates (``out`` is None)."""
    shape, numel = _shape(size, caller)
    if dtype is None:
        dtype = out.dtype if isinstance(out, torch.Tensor) else torch.get_default_dtype()
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"{caller}: dtype must be a torch.dtype, got {dtype!r}")
    throw_if_invalid_device(device, iris_device, caller)
    _check_layout(layout, caller)
    if out is not None:
        throw_if_invalid_output_tensor(heap, out, numel, dtype, caller)
        tensor = out if out.shape == shape else out.view(shape)
    else:
        strides = _strides(shape, memory_format, like, caller)
        tensor = heap.allocate_tensor(shape, dtype, caller)
        if strides is not None:
            tensor = tensor.view(-1).as_strided(shape, strides)
    if fill is not _nothing:
        with torch.no_grad():
            fill(tensor)
    return tensor.requires_grad_() if requires_grad else tensor


def _nothing(tensor):
    pass


def empty(heap: SymmetricHeap, iris_device: Device, size: Size, *, out: torch.Tensor | None = None,
          dtype: torch.dtype | None = None, layout: torch.layout = torch.strided, device: Device | None = None,
          requires_grad: bool = False, memory_format: torch.memory_format = torch.contiguous_format,
          caller: str = f"{_MODULE}.empty") -> torch.Tensor:
    """An uninitialised heap tensor."""
    return create(heap, iris_device, caller, size, dtype, _nothing, out=out, device=device, layout=layout,
                  requires_grad=requires_grad, memory_format=memory_format)


def zeros(heap: SymmetricHeap, iris_device: Device, size: Size, *, out: torch.Tensor | None = None,
          dtype: torch.dtype | None = None, layout: torch.layout = torch.strided, device: Device | None = None,
          requires_grad: bool = False, caller: str = f"{_MODULE}.zeros") -> torch.Tensor:
    """A heap tensor of zeros."""
    return create(heap, iris_device, caller, size, dtype, torch.Tensor.zero_, out=out, device=device, layout=layout,
                  requires_grad=requires_grad)


def ones(heap: SymmetricHeap, iris_device: Device, size: Size, *, out: torch.Tensor | None = None,
         dtype: torch.dtype | None = None, layout: torch.layout = torch.strided, device: Device | None = None,
         requires_grad: bool = False, caller: str = f"{_MODULE}.ones") -> torch.Tensor:
    """A heap tensor of ones."""
    return create(heap, iris_device, caller, size, dtype, lambda t: t.fill_(1), out=out, device=device,
                  layout=layout, requires_grad=requires_grad)


def full(heap: SymmetricHeap, iris_device: Device, size: Size, fill_value: Scalar, *,
         out: torch.Tensor | None = None, dtype: torch.dtype | None = None, layout: torch.layout = torch.strided,
         device: Device | None = None, requires_grad: bool = False,
         caller: str = f"{_MODULE}.full") -> torch.Tensor:
    """A heap tensor filled with ``fill_value``; without ``dtype`` (or ``out``), the dtype torch.full infers from
    it (bool, int64, the default float type, or complex)."""
    if dtype is None and out is None:
        dtype = torch.full((), fill_value).dtype
    return create(heap, iris_device, caller, size, dtype, lambda t: t.fill_(fill_value), out=out, device=device,
                  layout=layout, requires_grad=requires_grad)


def zeros_like(heap: SymmetricHeap, iris_device: Device, input: torch.Tensor, *, dtype: torch.dtype | None = None,
               layout: torch.layout | None = None, device: Device | None = None, requires_grad: bool = False,
               memory_format: torch.memory_format = torch.preserve_format,
               caller: str = f"{_MODULE}.zeros_like") -> torch.Tensor:
    """A heap tensor of zeros with ``input``'s shape, dtype (unless given) and, by default, its memory layout."""
    return like(heap, iris_device, caller, input, torch.Tensor.zero_, dtype=dtype, layout=layout, device=device,
                requires_grad=requires_grad, memory_format=memory_format)


def like(heap: SymmetricHeap, iris_device: Device, caller: str, input: torch.Tensor,
         fill: Callable[[torch.Tensor], object], *, dtype: torch.dtype | None = None,
         layout: torch.layout | None = None, device: Device | None = None, requires_grad: bool = False,
         memory_format: torch.memory_format = torch.preserve_format) -> torch.Tensor:
    """``create`` for the ``*_like`` factories: ``input``'s shape, dtype and layout unless given, and by default its
    memory layout."""
    return create(heap, iris_device, caller, tuple(input.shape), input.dtype if dtype is None else dtype, fill,
                  device=device, layout=input.layout if layout is None else layout, requires_grad=requires_grad,
                  memory_format=memory_format, like=input)
