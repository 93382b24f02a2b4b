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
    ``(((2, 3),),)`` all give ``(2, 3)``; ``((),)`` is a 0-d shape of one element; one int (the module functions'
    ``size``, as ``torch.zeros(4)``) gives ``(4,)``. A list comes back as the list. Raises ``TypeError`` for a size
    that is not integers or one sequence of them.

    Example::

        assert iris.tensor_creation.parse_size((2, 3)) == ((2, 3), 6)
        assert iris.tensor_creation.parse_size(([4, 5],)) == ([4, 5], 20)
    """
    if isinstance(size, int) and not isinstance(size, bool):
        size = (size,)
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
    index (``"cuda"`` means the current device, which iris sets to the rank's GPU).

    Example::

        heap_device = ctx.get_device()
        assert iris.tensor_creation.is_valid_device(None, heap_device)
        assert iris.tensor_creation.is_valid_device(heap_device.type, heap_device)
        assert not iris.tensor_creation.is_valid_device("meta", heap_device)
    """
    if device is None:
        return True
    requested, heap = torch.device(device), torch.device(iris_device)
    return requested.type == heap.type and (requested.index is None or requested.index == heap.index)


def throw_if_invalid_device(device: Device | None, iris_device: Device, caller: str = _MODULE) -> None:
    """Raises ``RuntimeError`` (torch's kind for a device mismatch) naming ``caller`` unless ``is_valid_device``.

    Example::

        iris.tensor_creation.throw_if_invalid_device(None, ctx.get_device())  # returns
        try:
            iris.tensor_creation.throw_if_invalid_device("meta", ctx.get_device(), "mylib.zeros")
            assert False, "unreachable: the meta device is not the heap's"
        except RuntimeError as e:
            assert str(e).startswith("mylib.zeros: device='meta'")
    """
    if not is_valid_device(device, iris_device):
        raise RuntimeError(f"{caller}: device={device!r} but this rank's symmetric heap is on {iris_device}; heap "
                           f"tensors live on the heap's device: pass device=None or device={str(iris_device)!r}")


def _check_layout(layout, caller):
    if layout != torch.strided:
        raise ValueError(f"{caller}: layout={layout} is not supported; the symmetric heap holds dense tensors only "
                         "(layout=torch.strided)")


def apply_layout(tensor: torch.Tensor, layout: torch.layout, caller: str = _MODULE) -> torch.Tensor:
    """``tensor`` itself for ``torch.strided``; any other layout raises ``ValueError`` naming ``caller``.

    Example::

        x = ctx.zeros(4)
        assert iris.tensor_creation.apply_layout(x, torch.strided) is x
    """
    _check_layout(layout, caller)
    return tensor


def throw_if_invalid_output_tensor(heap: SymmetricHeap, tensor: torch.Tensor, num_elements: int, dtype: torch.dtype,
                                   caller: str = _MODULE) -> None:
    """``RuntimeError`` unless ``tensor`` (an ``out=`` argument) has ``num_elements`` elements of ``dtype`` and lies
    on ``heap``: a factory writes its result into ``out`` in place, so it cannot resize, cast or move it (a
    ``TypeError`` when ``tensor`` is not a tensor).

    Example::

        out = ctx.empty(8, dtype=torch.int32)
        iris.tensor_creation.throw_if_invalid_output_tensor(ctx.heap, out, 8, torch.int32)  # returns
        try:
            iris.tensor_creation.throw_if_invalid_output_tensor(ctx.heap, out, 8, torch.float32, "mylib.fill")
            assert False, "unreachable: the dtypes differ"
        except RuntimeError as e:
            assert "has dtype torch.int32, but torch.float32 is required" in str(e)
    """
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
    Collective when it allocates (``out`` is None).

    Raises ``TypeError`` for a size that is not integers or a dtype that is not a ``torch.dtype``, ``RuntimeError``
    for a negative dimension, a ``device`` other than the heap's or an ``out`` that does not fit, ``ValueError`` for a
    layout other than strided or an unknown ``memory_format``, and ``MemoryError`` when the heap has no room left.

    Example::

        x = iris.tensor_creation.create(ctx.heap, ctx.get_device(), "mylib.iota", (2, 4), torch.int32,
                                        lambda t: t.copy_(torch.arange(8).view(2, 4)))
        assert x.tolist() == [[0, 1, 2, 3], [4, 5, 6, 7]] and ctx.is_symmetric(x)
    """
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
    """An uninitialised heap tensor (collective), upstream Iris's function; ``ctx.empty`` is the method. Raises
    ``create``'s errors.

    Example::

        x = iris.tensor_creation.empty(ctx.heap, ctx.get_device(), (4, 2), dtype=torch.float16)
        assert x.shape == (4, 2) and x.dtype == torch.float16 and ctx.is_symmetric(x)
    """
    return create(heap, iris_device, caller, size, dtype, _nothing, out=out, device=device, layout=layout,
                  requires_grad=requires_grad, memory_format=memory_format)


def zeros(heap: SymmetricHeap, iris_device: Device, size: Size, *, out: torch.Tensor | None = None,
          dtype: torch.dtype | None = None, layout: torch.layout = torch.strided, device: Device | None = None,
          requires_grad: bool = False, caller: str = f"{_MODULE}.zeros") -> torch.Tensor:
    """A heap tensor of zeros (collective), upstream Iris's function; ``ctx.zeros`` is the method. Raises
    ``create``'s errors.

    Example::

        x = iris.tensor_creation.zeros(ctx.heap, ctx.get_device(), (4, 2))
        assert x.shape == (4, 2) and not x.any() and ctx.is_symmetric(x)
    """
    return create(heap, iris_device, caller, size, dtype, torch.Tensor.zero_, out=out, device=device, layout=layout,
                  requires_grad=requires_grad)


def ones(heap: SymmetricHeap, iris_device: Device, size: Size, *, out: torch.Tensor | None = None,
         dtype: torch.dtype | None = None, layout: torch.layout = torch.strided, device: Device | None = None,
         requires_grad: bool = False, caller: str = f"{_MODULE}.ones") -> torch.Tensor:
    """A heap tensor of ones (collective), upstream Iris's function; ``ctx.ones`` is the method. Raises ``create``'s
    errors.

    Example::

        x = iris.tensor_creation.ones(ctx.heap, ctx.get_device(), (16,), dtype=torch.int32)
        assert x.sum() == 16 and ctx.is_symmetric(x)
    """
    return create(heap, iris_device, caller, size, dtype, lambda t: t.fill_(1), out=out, device=device,
                  layout=layout, requires_grad=requires_grad)


def full(heap: SymmetricHeap, iris_device: Device, size: Size, fill_value: Scalar, *,
         out: torch.Tensor | None = None, dtype: torch.dtype | None = None, layout: torch.layout = torch.strided,
         device: Device | None = None, requires_grad: bool = False,
         caller: str = f"{_MODULE}.full") -> torch.Tensor:
    """A heap tensor filled with ``fill_value``; without ``dtype`` (or ``out``), the dtype torch.full infers from
    it (bool, int64, the default float type, or complex). Collective; ``ctx.full`` is the method. Raises
    ``create``'s errors.

    Example::

        x = iris.tensor_creation.full(ctx.heap, ctx.get_device(), (2, 3), 0.5)
        assert x.dtype == torch.get_default_dtype() and torch.all(x == 0.5)
    """
    if dtype is None and out is None:
        dtype = torch.full((), fill_value).dtype
    return create(heap, iris_device, caller, size, dtype, lambda t: t.fill_(fill_value), out=out, device=device,
                  layout=layout, requires_grad=requires_grad)


def zeros_like(heap: SymmetricHeap, iris_device: Device, input: torch.Tensor, *, dtype: torch.dtype | None = None,
               layout: torch.layout | None = None, device: Device | None = None, requires_grad: bool = False,
               memory_format: torch.memory_format = torch.preserve_format,
               caller: str = f"{_MODULE}.zeros_like") -> torch.Tensor:
    """A heap tensor of zeros with ``input``'s shape, dtype (unless given) and, by default, its memory layout.
    Collective; ``ctx.zeros_like`` is the method. Raises ``create``'s errors.

    Example::

        x = iris.tensor_creation.zeros_like(ctx.heap, ctx.get_device(), torch.ones(3, 5, dtype=torch.float16))
        assert x.shape == (3, 5) and x.dtype == torch.float16 and not x.any()
    """
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
