"""PyTorch-style tensor creation on the symmetric heap.

Every factory does the same two steps: carve the tensor out of the heap (collective: all ranks call it
with the same shape and dtype, so it lands at the same offset everywhere), then fill it with the ordinary
torch operation in place. Random fills draw from torch's generator on each rank; seed each rank
differently (``torch.manual_seed(seed + rank)``) when ranks need different data.
"""

import math

import torch


def _shape(size, caller):
    if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)):
        size = tuple(size[0])
    if not all(isinstance(d, int) and not isinstance(d, bool) for d in size):
        raise TypeError(f"{caller}: size must be integers or one tuple of integers, got {size!r}")
    return tuple(size)


def _require_floating(dtype, caller):
    if not (dtype.is_floating_point or dtype.is_complex):
        raise ValueError(f"{caller}: dtype {dtype} is not a floating-point type; random normal/uniform values need "
                         "one (torch.float32, torch.bfloat16, ...); use randint for integers")


class TensorFactory:
    """Mixed into ``Iris``; needs ``self.heap`` and ``self.device``."""

    def _create(self, name, shape, dtype, device, requires_grad, layout, fill):
        caller = f"Iris.{name}"
        dtype = torch.get_default_dtype() if dtype is None else dtype
        if layout is not torch.strided:
            raise ValueError(f"{caller}: layout={layout} is not supported; the heap holds strided tensors only")
        if device is not None and torch.device(device) != self.device:
            raise ValueError(f"{caller}: device={device} but this rank's heap is on {self.device}; leave device "
                             "unset")
        tensor = self.heap.allocate(shape, dtype, caller)
        fill(tensor)
        return tensor.requires_grad_() if requires_grad else tensor

    def empty(self, *size, dtype=None, device=None, requires_grad=False, layout=torch.strided):
        """Collective. An uninitialised heap tensor."""
        return self._create("empty", _shape(size, "Iris.empty"), dtype, device, requires_grad, layout,
                            lambda t: None)

    def zeros(self, *size, dtype=None, device=None, requires_grad=False, layout=torch.strided):
        """Collective. A heap tensor of zeros."""
        return self._create("zeros", _shape(size, "Iris.zeros"), dtype, device, requires_grad, layout,
                            lambda t: t.zero_())

    def ones(self, *size, dtype=None, device=None, requires_grad=False, layout=torch.strided):
        """Collective. A heap tensor of ones."""
        return self._create("ones", _shape(size, "Iris.ones"), dtype, device, requires_grad, layout,
                            lambda t: t.fill_(1))

    def full(self, size, fill_value, *, dtype=None, device=None, requires_grad=False, layout=torch.strided):
        """Collective. A heap tensor filled with ``fill_value``; the dtype is inferred from it as torch.full does."""
        if dtype is None:
            dtype = torch.full((), fill_value).dtype
        return self._create("full", _shape((size,), "Iris.full"), dtype, device, requires_grad, layout,
                            lambda t: t.fill_(fill_value))

    def zeros_like(self, input, *, dtype=None, device=None, requires_grad=False, layout=torch.strided):
        """Collective. A heap tensor of zeros with ``input``'s shape (and dtype unless given)."""
        dtype = input.dtype if dtype is None else dtype
        return self.zeros(input.shape, dtype=dtype, device=device, requires_grad=requires_grad, layout=layout)

    def randn(self, *size, generator=None, dtype=None, device=None, requires_grad=False, layout=torch.strided):
        """Collective. Normal(0, 1) values."""
        def fill(t):
            _require_floating(t.dtype, "Iris.randn")
            t.normal_(generator=generator)

        return self._create("randn", _shape(size, "Iris.randn"), dtype, device, requires_grad, layout, fill)

    def rand(self, *size, generator=None, dtype=None, device=None, requires_grad=False, layout=torch.strided):
        """Collective. Uniform values in [0, 1)."""
        return self.uniform(_shape(size, "Iris.rand"), 0.0, 1.0, generator=generator, dtype=dtype, device=device,
                            requires_grad=requires_grad, layout=layout)

    def uniform(self, size, low=0.0, high=1.0, *, generator=None, dtype=None, device=None, requires_grad=False,
                layout=torch.strided):
        """Collective. Uniform values in [low, high)."""
        def fill(t):
            _require_floating(t.dtype, "Iris.uniform")
            t.uniform_(low, high, generator=generator)

        return self._create("uniform", _shape((size,), "Iris.uniform"), dtype, device, requires_grad, layout, fill)

    def randint(self, *args, size=None, generator=None, dtype=torch.int64, device=None, requires_grad=False,
                layout=torch.strided):
        """Collective. Integers in [low, high): ``randint(high, size)`` or ``randint(low, high, size)``."""
        if size is None and args:
            args, size = args[:-1], args[-1]
        if size is None or len(args) not in (1, 2):
            raise TypeError("Iris.randint: call it as randint(high, size) or randint(low, high, size)")
        low, high = (0, args[0]) if len(args) == 1 else args
        return self._create("randint", _shape((size,), "Iris.randint"), dtype, device, requires_grad, layout,
                            lambda t: t.random_(low, high, generator=generator))

    def arange(self, start=0, end=None, step=1, *, dtype=None, device=None, requires_grad=False,
               layout=torch.strided):
        """Collective. ``arange(end)`` or ``arange(start, end, step)``, dtype inferred as torch.arange does."""
        if end is None:
            start, end = 0, start
        if step == 0:
            raise ValueError("Iris.arange: step must be nonzero")
        if dtype is None:
            dtype = torch.int64 if all(isinstance(v, int) for v in (start, end, step)) else torch.get_default_dtype()
        numel = max(math.ceil((end - start) / step), 0)
        return self._create("arange", (numel,), dtype, device, requires_grad, layout,
                            lambda t: torch.arange(start, end, step, out=t))

    def linspace(self, start, end, steps, *, dtype=None, device=None, requires_grad=False, layout=torch.strided):
        """Collective. ``steps`` evenly spaced values from ``start`` to ``end`` inclusive."""
        return self._create("linspace", (steps,), dtype, device, requires_grad, layout,
                            lambda t: torch.linspace(start, end, steps, out=t))

    def as_symmetric(self, tensor):
        """Collective. A heap copy of ``tensor`` (same shape, dtype and values). It copies, on every allocator:
        memory from torch's allocator cannot be exported to peers, and mapping a caller's VMM allocation into the
        heap would need a hole at the same offset on every rank. It always allocates, even for a tensor already
        on the heap, so that every rank's heap makes the same allocations."""
        out = self.empty(tensor.shape, dtype=tensor.dtype)
        out.copy_(tensor)
        return out
