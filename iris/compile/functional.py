"""``torch.ops.iris.*``: functional collectives and fused GEMM + communication ops for ``torch.compile``.

``import iris.compile`` registers the ops; ``iris.compile.set_context(ctx)`` (collective: every rank, once)
binds them to a context and allocates its staging buffer (``iris/distributed/staging.py``). Each op takes
ordinary tensors and returns a new one; the semantics are those of ``ctx.ccl`` and ``ctx.ops`` over the
whole world:

    all_reduce(x)                 sum over ranks of x
    all_gather(x)                 cat over ranks of x along dim 0
    reduce_scatter(x)             rows rank of (sum over ranks of x), dim 0 split into world_size slices
    all_to_all(x)                 cat over ranks r of (x_r split into world_size slices along dim 0)[rank]
    matmul_all_reduce(A, B)       sum over ranks of A_r @ B_r                  A [M, K / W], B [K / W, N]
    all_gather_matmul(A, B)       cat over ranks of A_r along dim 0, @ B       A [M / W, K], B [K, N]
    matmul_all_gather(A, B)       cat over ranks of A @ B_r along dim 1        A [M, K], B [K, N / W]
    matmul_reduce_scatter(A, B)   rows rank of sum over ranks of A_r @ B_r     A [M, K / W], B [K / W, N]

Each has a fake implementation, so ``torch.compile(fullgraph=True)`` traces it as one opaque node, and none
allocates on the heap or synchronises the host after its first call at a shape, so ``mode="reduce-overhead"``
replays it in a CUDA graph. The ops are defined on a ``torch.library.Library`` with one kernel for every device
(``CompositeExplicitAutograd``): an eager call is the dispatcher and our function (2.7 us on a 2-core host, against
8.9 us through ``torch.library.custom_op``, whose autograd and dynamo wrappers run on every call). None has an
autograd formula; backward through one takes torch's fallback for such ops (a warning, no gradient), as torch's own
functional collectives do.
"""

import weakref

import torch

from iris.distributed.collectives import GroupCollectives
from iris.distributed.staging import staging_for
from iris.iris import Iris

# The bound context, held weakly: a context the program drops (``del ctx; gc.collect()``) gives its heap back
# even while bound, and the ops then say that none is bound. Its collectives (and staging buffer) hang off the
# context itself, so they go with it.
_iris_ctx = None  # weakref.ref to the bound Iris, or None


def set_context(ctx: Iris, staging_bytes: int | None = None) -> None:
    """Bind ``torch.ops.iris.*`` to ``ctx`` (an ``iris.Iris``). Collective: every rank, with the same
    ``staging_bytes`` (see ``iris.distributed.staging.staging_for``), before the ops run or are traced. The
    binding does not keep ``ctx`` alive.

    Raises ``TypeError`` when ``ctx`` is not an ``iris.Iris``; ``ValueError`` for a ``staging_bytes`` below 256, or
    other than that of the staging buffer the context already has.

    Example::

        import iris.compile  # registers the torch.ops.iris ops
        iris.compile.set_context(ctx)  # every rank, once
        x = torch.full((4,), float(rank + 1), device=ctx.get_device())  # an ordinary tensor
        assert torch.all(torch.ops.iris.all_reduce(x) == world_size * (world_size + 1) / 2)
    """
    global _iris_ctx
    if not isinstance(ctx, Iris):
        raise TypeError(f"iris.compile.set_context: Expected an Iris instance (ctx = iris.iris(...)), got "
                        f"{type(ctx).__name__}")
    ctx.integrations["compile"] = GroupCollectives(ctx, staging_for(ctx, staging_bytes), range(ctx.get_num_ranks()), None)
    _iris_ctx = weakref.ref(ctx)


def get_context() -> Iris:
    """The context ``set_context`` bound.

    Raises ``RuntimeError`` when none is (or it was dropped).

    Example::

        import iris.compile  # registers the torch.ops.iris ops
        iris.compile.set_context(ctx)
        assert iris.compile.get_context() is ctx
    """
    ctx = _iris_ctx() if _iris_ctx is not None else None
    if ctx is None:
        raise RuntimeError("iris.compile: Iris context not set; call iris.compile.set_context(ctx) on every rank "
                           "first (ctx = iris.iris(...))")
    return ctx


def _world(op):
    try:
        return get_context().integrations["compile"]
    except RuntimeError:
        raise RuntimeError(f"torch.ops.iris.{op}: Iris context not set; call iris.compile.set_context(ctx) on "
                           "every rank first (ctx = iris.iris(...))") from None


def _rows_divided(op, x, size):
    if x.dim() == 0 or x.shape[0] % size:
        raise ValueError(f"torch.ops.iris.{op}: dim 0 of shape {tuple(x.shape)} must split into {size} equal slices "
                         f"(one per rank); pad it to a multiple of {size}")
    return x.shape[0] // size


_LIBRARY = torch.library.Library("iris", "DEF")


def _define(name, schema, kernel, fake):
    """``torch.ops.iris.<name>`` with ``schema``, running ``kernel`` on every device and ``fake`` under tracing; the
    op's overload is the public callable."""
    _LIBRARY.define(f"{name}{schema}")
    _LIBRARY.impl(name, kernel, "CompositeExplicitAutograd")
    torch.library.register_fake(f"iris::{name}", fake, lib=_LIBRARY)
    return getattr(torch.ops.iris, name).default


_ONE = "(Tensor x) -> Tensor"
_TWO = "(Tensor a, Tensor b) -> Tensor"

# Each op's output is made by one function, which is also the op's fake implementation: tracing sees the shape
# and the checks that the call itself makes.
# ---------------------------------------------------------------------- collectives
def _all_reduce_out(x):
    _world("all_reduce")
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _all_reduce(x):
    ops = _world("all_reduce")  # once: _all_reduce_out's lookup, inlined
    out = torch.empty_like(x, memory_format=torch.contiguous_format)
    ops.all_reduce(x.contiguous(), "sum", "torch.ops.iris.all_reduce", out=out)
    return out


all_reduce = _define("all_reduce", _ONE, _all_reduce, _all_reduce_out)


def _all_gather_out(x):
    size = _world("all_gather").size
    return x.new_empty((size * x.shape[0], *x.shape[1:]) if x.dim() else (size,))


def _all_gather(x):
    out = _all_gather_out(x)
    _world("all_gather").all_gather(out, x.contiguous(), "torch.ops.iris.all_gather")
    return out


all_gather = _define("all_gather", _ONE, _all_gather, _all_gather_out)


def _reduce_scatter_out(x):
    return x.new_empty((_rows_divided("reduce_scatter", x, _world("reduce_scatter").size), *x.shape[1:]))


def _reduce_scatter(x):
    out = _reduce_scatter_out(x)
    _world("reduce_scatter").reduce_scatter(out, x.contiguous(), "sum", "torch.ops.iris.reduce_scatter")
    return out


reduce_scatter = _define("reduce_scatter", _ONE, _reduce_scatter, _reduce_scatter_out)


def _all_to_all_out(x):
    _rows_divided("all_to_all", x, _world("all_to_all").size)
    return torch.empty_like(x, memory_format=torch.contiguous_format)


def _all_to_all(x):
    out = _all_to_all_out(x)
    _world("all_to_all").all_to_all(out, x.contiguous(), "torch.ops.iris.all_to_all")
    return out


all_to_all = _define("all_to_all", _ONE, _all_to_all, _all_to_all_out)


# ---------------------------------------------------------------------- fused GEMM + communication
def _matmul_shape(op, a, b, rows=1, cols=1):
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"torch.ops.iris.{op}: A {tuple(a.shape)} and B {tuple(b.shape)} must be 2-D with A's "
                         "columns equal to B's rows")
    return a.shape[0] * rows, b.shape[1] * cols


def _matmul_all_reduce_out(a, b):
    _world("matmul_all_reduce")
    return a.new_empty(_matmul_shape("matmul_all_reduce", a, b))


def _matmul_all_reduce(a, b):
    world = _world("matmul_all_reduce")
    out = _matmul_all_reduce_out(a, b)
    M, N = out.shape
    if M * N <= world.staging.elements(a.dtype):  # the fused kernel stores reduced tiles into peers' out
        staged = world.staging.view(a.dtype, M * N).view(M, N)
        world.ctx.ops.matmul_all_reduce(staged, a.contiguous(), b.contiguous())
        out.copy_(staged)
    else:
        world.ctx.ops.matmul_all_reduce(out, a.contiguous(), b.contiguous())
    return out


matmul_all_reduce = _define("matmul_all_reduce", _TWO, _matmul_all_reduce, _matmul_all_reduce_out)


def _all_gather_matmul_out(a, b):
    return a.new_empty(_matmul_shape("all_gather_matmul", a, b, rows=_world("all_gather_matmul").size))


def _all_gather_matmul(a, b):
    out = _all_gather_matmul_out(a, b)
    _world("all_gather_matmul").ctx.ops.all_gather_matmul(out, a.contiguous(), b.contiguous())
    return out


all_gather_matmul = _define("all_gather_matmul", _TWO, _all_gather_matmul, _all_gather_matmul_out)


def _matmul_all_gather_out(a, b):
    return a.new_empty(_matmul_shape("matmul_all_gather", a, b, cols=_world("matmul_all_gather").size))


def _matmul_all_gather(a, b):
    world = _world("matmul_all_gather")
    out = _matmul_all_gather_out(a, b)
    M, N = out.shape
    rows = world.staging.elements(a.dtype) // max(N, 1)  # out must be on the heap: row blocks through staging
    if rows < 1:
        raise ValueError(f"torch.ops.iris.matmul_all_gather: one row of {N} {a.dtype} elements exceeds the "
                         f"{world.staging.nbytes}-byte staging buffer; raise IRIS_STAGING_BYTES")
    a, b = a.contiguous(), b.contiguous()
    for start in range(0, M, rows):
        part = a[start:start + rows]
        staged = world.staging.view(a.dtype, part.shape[0] * N).view(part.shape[0], N)
        world.ctx.ops.matmul_all_gather(staged, part, b)
        out[start:start + part.shape[0]].copy_(staged)
    return out


matmul_all_gather = _define("matmul_all_gather", _TWO, _matmul_all_gather, _matmul_all_gather_out)


def _matmul_reduce_scatter_out(a, b):
    _, N = _matmul_shape("matmul_reduce_scatter", a, b)
    return a.new_empty((_rows_divided("matmul_reduce_scatter", a, _world("matmul_reduce_scatter").size), N))


def _matmul_reduce_scatter(a, b):
    out = _matmul_reduce_scatter_out(a, b)
    _world("matmul_reduce_scatter").ctx.ops.matmul_reduce_scatter(out, a.contiguous(), b.contiguous())
    return out


matmul_reduce_scatter = _define("matmul_reduce_scatter", _TWO, _matmul_reduce_scatter, _matmul_reduce_scatter_out)


__all__ = ["set_context", "get_context", "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "matmul_all_reduce",
           "all_gather_matmul", "matmul_all_gather", "matmul_reduce_scatter"]
