"""PyTorch-style tensor creation on the symmetric heap.

Every factory is ``iris.host.memory.creation.create`` with a fill: carve the tensor out of the heap (collective: all
ranks call it with the same shape and dtype, so it lands at the same offset everywhere) or take ``out=``, then
fill it with the ordinary torch operation in place. The keywords are torch's (``out``, ``dtype``, ``layout``,
``device``, ``requires_grad``, ``pin_memory``, ``memory_format``, ``generator``); ``device`` must name the heap's
device (``"cuda"`` without an index is the rank's GPU), and ``pin_memory`` has nothing to do: heap pages are device
memory on GPUs and shared pages every rank maps on the cpu backend.

The random factories (``randn``, ``rand``, ``randint``, ``uniform``) are collective like the others, and without a
``generator=`` they give the same values on every rank, whatever each rank's own torch seed: they draw from one
generator per context, seeded at creation from rank 0's ``torch.initial_seed()`` and advanced alike by every rank's
(collective) calls. ``torch.manual_seed(s)`` on every rank before ``iris.iris()`` makes a run reproducible. A rank
that needs data of its own passes its own generator (``generator=torch.Generator(device).manual_seed(seed + rank)``),
which is used as given and leaves the shared stream where it was.
"""

from collections.abc import Sequence

import torch

from iris.host.memory import creation as tensor_creation
from iris.host.memory.creation import Device, Scalar, Size, create


def _require_floating(dtype, caller):
    if not (dtype.is_floating_point or dtype.is_complex):
        raise ValueError(f"{caller}: dtype {dtype} is not a floating-point type; random normal/uniform values need "
                         "one (torch.float32, torch.bfloat16, ...); use randint for integers")


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool) or (
        isinstance(value, torch.Tensor) and not value.is_floating_point() and not value.is_complex())


def _is_complex(value):
    return isinstance(value, complex) or (isinstance(value, torch.Tensor) and value.is_complex())


def _steps(steps, caller):
    """``linspace``'s steps as an int: ``5``, ``(5,)``, ``[5]`` or ``((5,),)``."""
    if isinstance(steps, (tuple, list, torch.Size)):
        flat, _ = tensor_creation._shape((steps,), caller)
        if len(flat) != 1:
            raise TypeError(f"{caller}: steps must be one integer, got {steps!r}")
        steps = flat[0]
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 0:
        raise TypeError(f"{caller}: steps must be a non-negative integer, got {steps!r}")
    return steps


def _plain_shape(size):
    """``size`` as a tuple when it is non-negative ints (``(n,)``, ``(m, n)``, ``((m, n),)``), else None."""
    if len(size) == 1 and type(size[0]) is int:  # ctx.empty(n): the tuple itself
        return size if size[0] >= 0 else None
    if len(size) == 1:
        size = size[0]
        if type(size) not in (tuple, list, torch.Size):
            return None
    for d in size:
        if type(d) is not int or d < 0:
            return None
    return tuple(size)


def _normal_fill(generator, caller):
    """Fill a floating-point tensor in place with Normal(0, 1) values from ``generator``."""
    def fill(t):
        _require_floating(t.dtype, caller)
        t.normal_(generator=generator)

    return fill


def _uniform_fill(low, high, generator, caller):
    """Fill a floating-point tensor in place with uniform values in [low, high) from ``generator``."""
    def fill(t):
        _require_floating(t.dtype, caller)
        t.uniform_(low, high, generator=generator)

    return fill


class TensorFactory:
    """Mixed into ``Iris``; needs ``self.heap`` and ``self.get_device()``, and ``init_random(seed)`` called once with
    a seed every rank agrees on before the first random factory."""

    def init_random(self, seed: int) -> None:
        """Seed the context's shared random stream, from which the random factories draw without a ``generator=``.
        Every rank passes the same ``seed``: nothing is exchanged, so a rank given another seed draws other values.
        Context creation seeds it with rank 0's ``torch.initial_seed()``.

        Example::

            ctx.init_random(1234)  # the same seed on every rank
            a = ctx.randn(8)
            ctx.init_random(1234)
            assert torch.equal(ctx.randn(8), a)  # the stream again from its start
        """
        self._shared_generator = torch.Generator(self.get_device()).manual_seed(seed)

    def _generator(self, generator):
        return self._shared_generator if generator is None else generator

    def _make(self, name, size, dtype, fill, **kwargs):
        return create(self.heap, self.get_device(), f"Iris.{name}", size, dtype, fill, **kwargs)

    def empty(self, *size: int | Sequence[int], out: torch.Tensor | None = None, dtype: torch.dtype | None = None,
              layout: torch.layout = torch.strided, device: Device | None = None, requires_grad: bool = False,
              pin_memory: bool = False, memory_format: torch.memory_format = torch.contiguous_format) -> torch.Tensor:
        """Collective. An uninitialised heap tensor.

        Example::

            x = ctx.empty(4, 2, dtype=torch.float16)
            assert x.shape == (4, 2) and x.dtype == torch.float16 and ctx.is_symmetric(x)
        """
        if out is None and device is None and not requires_grad and layout is torch.strided and (
                memory_format is torch.contiguous_format):
            shape = _plain_shape(size)
            if shape is not None:  # the common call, straight to the heap (the general path checks the same)
                return self.heap.allocate_tensor(shape, dtype or torch.get_default_dtype(), "Iris.empty")
        return self._make("empty", size, dtype, tensor_creation._nothing, out=out, layout=layout, device=device,
                          requires_grad=requires_grad, memory_format=memory_format)

    def zeros(self, *size: int | Sequence[int], out: torch.Tensor | None = None, dtype: torch.dtype | None = None,
              layout: torch.layout = torch.strided, device: Device | None = None,
              requires_grad: bool = False) -> torch.Tensor:
        """Collective. A heap tensor of zeros.

        Example::

            x = ctx.zeros(4, 2)  # also ctx.zeros((4, 2))
            assert x.shape == (4, 2) and ctx.is_symmetric(x) and not x.any()
        """
        return self._make("zeros", size, dtype, torch.Tensor.zero_, out=out, layout=layout, device=device,
                          requires_grad=requires_grad)

    def ones(self, *size: int | Sequence[int], out: torch.Tensor | None = None, dtype: torch.dtype | None = None,
             layout: torch.layout = torch.strided, device: Device | None = None,
             requires_grad: bool = False) -> torch.Tensor:
        """Collective. A heap tensor of ones.

        Example::

            x = ctx.ones(16, dtype=torch.int32)
            assert x.dtype == torch.int32 and x.sum() == 16
        """
        return self._make("ones", size, dtype, lambda t: t.fill_(1), out=out, layout=layout, device=device,
                          requires_grad=requires_grad)

    def full(self, size: Size, fill_value: Scalar, *, out: torch.Tensor | None = None, dtype: torch.dtype | None = None,
             layout: torch.layout = torch.strided, device: Device | None = None,
             requires_grad: bool = False) -> torch.Tensor:
        """Collective. A heap tensor filled with ``fill_value``; the dtype is inferred from it as torch.full does.

        Example::

            x = ctx.full((2, 3), 7)  # int64, as torch.full((2, 3), 7)
            assert x.dtype == torch.int64 and torch.all(x == 7)
        """
        return tensor_creation.full(self.heap, self.get_device(), size, fill_value, out=out, dtype=dtype,
                                    layout=layout, device=device, requires_grad=requires_grad, caller="Iris.full")

    def zeros_like(self, input: torch.Tensor, *, dtype: torch.dtype | None = None, layout: torch.layout | None = None,
                   device: Device | None = None, requires_grad: bool = False,
                   memory_format: torch.memory_format = torch.preserve_format) -> torch.Tensor:
        """Collective. A heap tensor of zeros with ``input``'s shape, dtype (unless given) and memory layout.

        Example::

            local = torch.ones(3, 5, dtype=torch.bfloat16)
            x = ctx.zeros_like(local)  # on the heap, whatever the device of local
            assert x.shape == local.shape and x.dtype == torch.bfloat16 and ctx.is_symmetric(x)
        """
        return tensor_creation.zeros_like(self.heap, self.get_device(), input, dtype=dtype, layout=layout,
                                          device=device, requires_grad=requires_grad, memory_format=memory_format,
                                          caller="Iris.zeros_like")

    def empty_like(self, input: torch.Tensor, *, dtype: torch.dtype | None = None, layout: torch.layout | None = None,
                   device: Device | None = None, requires_grad: bool = False,
                   memory_format: torch.memory_format = torch.preserve_format) -> torch.Tensor:
        """Collective. An uninitialised heap tensor with ``input``'s shape, dtype (unless given) and memory layout.
        Raises ``TypeError`` when ``input`` is not a tensor.

        Example::

            x = ctx.empty_like(torch.zeros(8, 4), dtype=torch.float16)
            assert x.shape == (8, 4) and x.dtype == torch.float16
        """
        return self._like("empty_like", input, tensor_creation._nothing, dtype, layout, device, requires_grad,
                          memory_format)

    def ones_like(self, input: torch.Tensor, *, dtype: torch.dtype | None = None, layout: torch.layout | None = None,
                  device: Device | None = None, requires_grad: bool = False,
                  memory_format: torch.memory_format = torch.preserve_format) -> torch.Tensor:
        """Collective. A heap tensor of ones with ``input``'s shape, dtype (unless given) and memory layout. Raises
        ``TypeError`` when ``input`` is not a tensor.

        Example::

            x = ctx.ones_like(torch.empty(2, 3))
            assert x.shape == (2, 3) and torch.all(x == 1)
        """
        return self._like("ones_like", input, lambda t: t.fill_(1), dtype, layout, device, requires_grad,
                          memory_format)

    def full_like(self, input: torch.Tensor, fill_value: Scalar, *, dtype: torch.dtype | None = None,
                  layout: torch.layout | None = None, device: Device | None = None, requires_grad: bool = False,
                  memory_format: torch.memory_format = torch.preserve_format) -> torch.Tensor:
        """Collective. A heap tensor of ``fill_value`` with ``input``'s shape, dtype (unless given) and memory
        layout. Raises ``TypeError`` when ``input`` is not a tensor.

        Example::

            x = ctx.full_like(torch.empty(4, dtype=torch.int32), rank)
            assert x.dtype == torch.int32 and torch.all(x == rank)
        """
        return self._like("full_like", input, lambda t: t.fill_(fill_value), dtype, layout, device, requires_grad,
                          memory_format)

    def rand_like(self, input: torch.Tensor, *, generator: torch.Generator | None = None,
                  dtype: torch.dtype | None = None, layout: torch.layout | None = None, device: Device | None = None,
                  requires_grad: bool = False,
                  memory_format: torch.memory_format = torch.preserve_format) -> torch.Tensor:
        """Collective. Uniform values in [0, 1) with ``input``'s shape, dtype (unless given) and memory layout; the
        same on every rank unless ``generator`` is given. Raises ``TypeError`` when ``input`` is not a tensor and
        ``ValueError`` for a dtype that is not floating-point.

        Example::

            x = ctx.rand_like(torch.empty(64))
            assert x.shape == (64,) and 0 <= x.min() and x.max() < 1
        """
        fill = _uniform_fill(0.0, 1.0, self._generator(generator), "Iris.rand_like")
        return self._like("rand_like", input, fill, dtype, layout, device, requires_grad, memory_format)

    def randn_like(self, input: torch.Tensor, *, generator: torch.Generator | None = None,
                   dtype: torch.dtype | None = None, layout: torch.layout | None = None, device: Device | None = None,
                   requires_grad: bool = False,
                   memory_format: torch.memory_format = torch.preserve_format) -> torch.Tensor:
        """Collective. Normal(0, 1) values with ``input``'s shape, dtype (unless given) and memory layout; the same on
        every rank unless ``generator`` is given. Raises ``TypeError`` when ``input`` is not a tensor and
        ``ValueError`` for a dtype that is not floating-point.

        Example::

            x = ctx.randn_like(torch.empty(32, 32), dtype=torch.bfloat16)
            assert x.shape == (32, 32) and x.dtype == torch.bfloat16
        """
        fill = _normal_fill(self._generator(generator), "Iris.randn_like")
        return self._like("randn_like", input, fill, dtype, layout, device, requires_grad, memory_format)

    def _like(self, name, input, fill, dtype, layout, device, requires_grad, memory_format):
        if not isinstance(input, torch.Tensor):
            raise TypeError(f"Iris.{name}: input must be a torch.Tensor, got {type(input).__name__}")
        return tensor_creation.like(self.heap, self.get_device(), f"Iris.{name}", input, fill, dtype=dtype,
                                    layout=layout, device=device, requires_grad=requires_grad,
                                    memory_format=memory_format)

    def randn(self, *size: int | Sequence[int], generator: torch.Generator | None = None,
              out: torch.Tensor | None = None, dtype: torch.dtype | None = None, layout: torch.layout = torch.strided,
              device: Device | None = None, requires_grad: bool = False, pin_memory: bool = False) -> torch.Tensor:
        """Collective. Normal(0, 1) values, the same on every rank unless ``generator`` is given (module docstring).
        Raises ``ValueError`` for a dtype that is not floating-point.

        Example::

            w = ctx.randn(64, 64)  # the same values on every rank
            assert ctx.broadcast(w, src=0).tolist() == w.tolist()
            mine = ctx.randn(64, generator=torch.Generator(ctx.get_device()).manual_seed(100 + rank))  # per rank
        """
        return self._make("randn", size, dtype, _normal_fill(self._generator(generator), "Iris.randn"), out=out,
                          layout=layout, device=device, requires_grad=requires_grad)

    def rand(self, *size: int | Sequence[int], generator: torch.Generator | None = None,
             out: torch.Tensor | None = None, dtype: torch.dtype | None = None, layout: torch.layout = torch.strided,
             device: Device | None = None, requires_grad: bool = False, pin_memory: bool = False) -> torch.Tensor:
        """Collective. Uniform values in [0, 1), the same on every rank unless ``generator`` is given. Raises
        ``ValueError`` for a dtype that is not floating-point.

        Example::

            x = ctx.rand(4, 16)
            assert x.shape == (4, 16) and 0 <= x.min() and x.max() < 1
        """
        return self._uniform("rand", size, 0.0, 1.0, generator, out=out, dtype=dtype, layout=layout, device=device,
                             requires_grad=requires_grad)

    def uniform(self, size: int | Sequence[int], low: float = 0.0, high: float = 1.0, *,
                generator: torch.Generator | None = None, out: torch.Tensor | None = None,
                dtype: torch.dtype | None = None, layout: torch.layout = torch.strided, device: Device | None = None,
                requires_grad: bool = False) -> torch.Tensor:
        """Collective. Uniform values in [low, high), the same on every rank unless ``generator`` is given. Raises
        ``ValueError`` for a dtype that is not floating-point.

        Example::

            x = ctx.uniform((8, 8), -1.0, 1.0)
            assert x.shape == (8, 8) and -1 <= x.min() and x.max() < 1
        """
        return self._uniform("uniform", (size,), low, high, generator, out=out, dtype=dtype, layout=layout,
                             device=device, requires_grad=requires_grad)

    def _uniform(self, name, size, low, high, generator, dtype, **kwargs):
        return self._make(name, size, dtype, _uniform_fill(low, high, self._generator(generator), f"Iris.{name}"),
                          **kwargs)

    def randint(self, *args: int | Sequence[int], size: int | Sequence[int] | None = None,
                generator: torch.Generator | None = None, out: torch.Tensor | None = None,
                dtype: torch.dtype | None = None, layout: torch.layout = torch.strided, device: Device | None = None,
                requires_grad: bool = False) -> torch.Tensor:
        """Collective. Integers in [low, high): ``randint(high, size)`` or ``randint(low, high, size)``; the same on
        every rank unless ``generator`` is given.

        Raises ``ValueError`` for another count of positional arguments, ``RuntimeError`` unless ``low < high``.

        Example::

            experts = ctx.randint(0, 8, (16,))  # int64 in [0, 8)
            assert experts.dtype == torch.int64 and 0 <= experts.min() and experts.max() < 8
        """
        if size is None and len(args) in (2, 3):
            args, size = args[:-1], args[-1]
        if size is None or len(args) not in (1, 2):
            raise ValueError(f"Iris.randint: got {len(args) + (size is not None)} positional arguments; call it as "
                             "randint(high, size) or randint(low, high, size)")
        low, high = (0, args[0]) if len(args) == 1 else args
        if not high > low:
            raise RuntimeError(f"Iris.randint: low={low} must be less than high={high} (values are drawn from "
                               "[low, high))")
        if dtype is None and out is None:
            dtype = torch.int64
        generator = self._generator(generator)
        return self._make("randint", (size,), dtype, lambda t: t.random_(low, high, generator=generator), out=out,
                          layout=layout, device=device, requires_grad=requires_grad)

    def arange(self, start: float | torch.Tensor = 0, end: float | torch.Tensor | None = None,
               step: float | torch.Tensor = 1, *, out: torch.Tensor | None = None, dtype: torch.dtype | None = None,
               layout: torch.layout = torch.strided, device: Device | None = None,
               requires_grad: bool = False) -> torch.Tensor:
        """Collective. ``arange(end)`` or ``arange(start, end, step)``, dtype inferred as torch.arange does.

        Raises ``ValueError`` for a ``step`` of 0 or one that moves away from ``end``.

        Example::

            x = ctx.arange(10)
            assert x.tolist() == list(range(10)) and x.dtype == torch.int64
            assert ctx.arange(0.0, 1.0, 0.25).tolist() == [0.0, 0.25, 0.5, 0.75]
        """
        if end is None:
            start, end = 0, start
        if step == 0:
            raise ValueError("Iris.arange: step must be non-zero")
        if (end - start) * step < 0:
            raise ValueError(f"Iris.arange: the range [{start}, {end}) is empty with step {step}; give end on the "
                             "side of start that step moves towards")
        if dtype is None:
            dtype = out.dtype if isinstance(out, torch.Tensor) else (
                torch.int64 if all(_is_int(v) for v in (start, end, step)) else torch.get_default_dtype())
        numel = torch.arange(start, end, step, device="meta", dtype=dtype).numel()  # torch's own count
        return self._make("arange", (numel,), dtype, lambda t: torch.arange(start, end, step, out=t), out=out,
                          layout=layout, device=device, requires_grad=requires_grad)

    def linspace(self, start: Scalar | torch.Tensor, end: Scalar | torch.Tensor, steps: int | Sequence[int], *,
                 out: torch.Tensor | None = None, dtype: torch.dtype | None = None,
                 layout: torch.layout = torch.strided, device: Device | None = None,
                 requires_grad: bool = False) -> torch.Tensor:
        """Collective. ``steps`` evenly spaced values from ``start`` to ``end`` inclusive; complex when either end
        is (dtype inferred as torch.linspace does).

        Raises ``TypeError`` for a ``steps`` that is not one non-negative integer.

        Example::

            x = ctx.linspace(0, 1, 5)
            assert x.tolist() == [0.0, 0.25, 0.5, 0.75, 1.0]
        """
        steps = _steps(steps, "Iris.linspace")
        if dtype is None and out is None:
            default = torch.get_default_dtype()
            dtype = ({torch.float64: torch.complex128}.get(default, torch.complex64)
                     if _is_complex(start) or _is_complex(end) else default)
        return self._make("linspace", (steps,), dtype, lambda t: torch.linspace(start, end, steps, out=t), out=out,
                          layout=layout, device=device, requires_grad=requires_grad)

    def as_symmetric(self, tensor: torch.Tensor) -> torch.Tensor:
        """Collective. A heap copy of ``tensor`` (same shape, dtype and values). It copies, on every allocator:
        memory from torch's allocator cannot be exported to peers, and mapping a caller's VMM allocation into the
        heap would need a hole at the same offset on every rank. It always allocates, even for a tensor already
        on the heap, so that every rank's heap makes the same allocations.

        Example::

            local = torch.arange(8.0, device=ctx.get_device()) + rank  # torch's memory, which peers cannot map
            x = ctx.as_symmetric(local)
            assert ctx.is_symmetric(x) and torch.equal(x, local)
        """
        out = self.empty(tensor.shape, dtype=tensor.dtype)
        out.copy_(tensor)
        return out
