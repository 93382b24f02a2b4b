"""The tile API's vocabulary: where a tile sits (``TileView``), a tile with its values (``Tile``), and a 2-D tensor
seen through a pointer, its sizes and strides (``TensorView``), with the functions behind them.

    @triton.jit
    def kernel(x, out, context, M, N, stride_m, stride_n, RANK: tl.constexpr, WORLD_SIZE: tl.constexpr, ...):
        ctx = iris.DeviceContext.initialize(context, RANK, WORLD_SIZE)
        tile = iris.x.Tile(pid_m, pid_n, BLOCK_M, BLOCK_N, values)          # values: [BLOCK_M, BLOCK_N]
        iris.x.all_reduce_one_shot(tile, src_view, iris.x.make_tensor_view(out, M, N, stride_m, stride_n), locks, ctx)

A tile's element offsets are int64 from its first element on (``_tile_offsets``): a tensor past 2**31 elements
(a 3.6 GB int8 output) is addressed right. Row and column indices carry the hints that are true of them (each
tile starts on a multiple of its block and is contiguous); pointers carry none, since a row stride that is not a
multiple of 16 bytes would make a hint about the address false.

The compiler needs Triton aggregates for the three classes; the interpreter (the cpu backend) loses an
aggregate's jitted methods, so there the same methods live on plain classes, as for ``iris.DeviceContext``.
"""

import os

import triton
import triton.language as tl

from iris.device.context import DeviceContext

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"


@triton.jit
def tile_layout(pid_m, pid_n, M, N, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr):
    """Row indices ``rm`` [BLOCK_SIZE_M], column indices ``rn`` [BLOCK_SIZE_N] and the in-bounds mask
    [BLOCK_SIZE_M, BLOCK_SIZE_N] of tile ``(pid_m, pid_n)`` of an ``M x N`` tensor.

    Example::

        import iris.x

        @triton.jit
        def number_tiles(out, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
            pid_m, pid_n = tl.program_id(0), tl.program_id(1)
            rm, rn, mask = iris.x.tile_layout(pid_m, pid_n, M, N, BLOCK_M, BLOCK_N)  # mask: [BLOCK_M, BLOCK_N]
            t = pid_m * tl.num_programs(1) + pid_n
            tl.store(out + rm[:, None] * N + rn[None, :], tl.full((BLOCK_M, BLOCK_N), t, tl.int32), mask=mask)

        M, N = 12, 10  # 2 x 2 tiles of 8 x 8, the last row and column of tiles cut short
        out = ctx.zeros(M, N, dtype=torch.int32)
        number_tiles[(2, 2)](out, M, N, BLOCK_M=8, BLOCK_N=8)
        rows, cols = torch.arange(M)[:, None] // 8, torch.arange(N)[None, :] // 8
        assert torch.equal(out.cpu(), (rows * 2 + cols).int())
    """
    rm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    rn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    rm = tl.max_contiguous(tl.multiple_of(rm, BLOCK_SIZE_M), BLOCK_SIZE_M)
    rn = tl.max_contiguous(tl.multiple_of(rn, BLOCK_SIZE_N), BLOCK_SIZE_N)
    mask = (rm[:, None] < M) & (rn[None, :] < N)
    return rm, rn, mask


@triton.jit
def _tile_offsets(rm, rn, stride_m, stride_n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """[BLOCK_M, BLOCK_N] int64 element offsets of the tile whose rows are ``rm`` and columns ``rn``."""
    return rm.to(tl.int64)[:, None] * stride_m + rn.to(tl.int64)[None, :] * stride_n


@triton.jit
def tile_ptr(ptr, M, N, stride_m, stride_n, pid_m, pid_n, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr):
    """[BLOCK_SIZE_M, BLOCK_SIZE_N] pointers to tile ``(pid_m, pid_n)`` of the ``M x N`` tensor at ``ptr``, and the
    mask of the elements inside it: ready for ``tl.load`` / ``tl.store`` or, on the heap, ``iris.load`` /
    ``iris.store`` to a peer.

    Example::

        import iris.x

        @triton.jit
        def read_peer_tile(x, out, M, N, rank, peer, heap_bases, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
            ptrs, mask = iris.x.tile_ptr(x, M, N, N, 1, 1, 0, BLOCK_M, BLOCK_N)  # tile (1, 0): rows 8.., columns ..7
            out_ptrs, _ = iris.x.tile_ptr(out, M, N, N, 1, 1, 0, BLOCK_M, BLOCK_N)
            tl.store(out_ptrs, iris.load(ptrs, rank, peer, heap_bases, mask=mask), mask=mask)

        M, N = 12, 10
        x, out = ctx.full((M, N), float(rank)), ctx.zeros(M, N)
        ctx.barrier()  # every rank's x is written before a peer reads it
        peer = (rank + 1) % world_size
        read_peer_tile[(1,)](x, out, M, N, rank, peer, ctx.get_heap_bases(), BLOCK_M=8, BLOCK_N=8)
        ref = torch.zeros(M, N)
        ref[8:, :8] = peer
        assert torch.equal(out.cpu(), ref)
    """
    rm, rn, mask = tile_layout(pid_m, pid_n, M, N, BLOCK_SIZE_M, BLOCK_SIZE_N)
    return ptr + _tile_offsets(rm, rn, stride_m, stride_n, BLOCK_SIZE_M, BLOCK_SIZE_N), mask


@triton.jit
def offset_ptr(ptr, stride_m, stride_n, offset_m, offset_n):
    """``ptr`` moved by ``offset_m`` rows and ``offset_n`` columns, in int64.

    Example::

        import iris.x

        @triton.jit
        def read_row_piece(x, out, stride_m, stride_n, BLOCK: tl.constexpr):
            start = iris.x.offset_ptr(x, stride_m, stride_n, 2, 3)  # &x[2, 3]
            offs = tl.arange(0, BLOCK)
            tl.store(out + offs, tl.load(start + offs * stride_n))

        x, out = ctx.arange(120, dtype=torch.float32).view(12, 10), ctx.zeros(4)
        read_row_piece[(1,)](x, out, x.stride(0), x.stride(1), BLOCK=4)
        assert torch.equal(out, x[2, 3:7])
    """
    return ptr + tl.cast(offset_m, tl.int64) * stride_m + tl.cast(offset_n, tl.int64) * stride_n


@triton.jit
def make_tensor_view(ptr, M, N, stride_m, stride_n):
    """A ``TensorView`` of ``ptr`` from kernel arguments, constexpr or not (sizes and strides become values).

    Example::

        import iris.x

        @triton.jit
        def copy_tile_through_views(x, out, M, N, stride_m, stride_n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
            src_view = iris.x.make_tensor_view(x, M, N, stride_m, stride_n)
            dst_view = iris.x.make_tensor_view(out, M, N, N, 1)
            tile = iris.x.TileView(tl.program_id(0), tl.program_id(1), BLOCK_M, BLOCK_N)
            src_ptrs, mask = src_view.tile_ptr(tile)
            dst_ptrs, _ = dst_view.tile_ptr(tile)
            tl.store(dst_ptrs, tl.load(src_ptrs, mask=mask), mask=mask)

        x = ctx.arange(120, dtype=torch.float32).view(10, 12).t()  # 12 x 10, column-major: strides (1, 12)
        out = ctx.zeros(12, 10)
        copy_tile_through_views[(2, 2)](x, out, 12, 10, x.stride(0), x.stride(1), BLOCK_M=8, BLOCK_N=8)
        assert torch.equal(out, x)
    """
    return TensorView(ptr, M + 0, N + 0, stride_m + 0, stride_n + 0)


class _TileMethods:
    def layout(self, M, N):
        """``rm, rn, mask`` of this tile in an ``M x N`` tensor (``tile_layout``)."""
        return tile_layout(self.pid_m, self.pid_n, M, N, self.block_m, self.block_n)

    def indices(self):
        """Row and column indices of this tile, unmasked."""
        rm = self.pid_m * self.block_m + tl.arange(0, self.block_m)
        rn = self.pid_n * self.block_n + tl.arange(0, self.block_n)
        return rm, rn


class _TensorViewMethods:
    def tile_ptr(self, tile):
        """Pointers to ``tile`` in this tensor and the in-bounds mask (``tile_ptr``)."""
        return tile_ptr(self.ptr, self.M, self.N, self.stride_m, self.stride_n, tile.pid_m, tile.pid_n, tile.block_m,
                        tile.block_n)

    def tile_ptr_from_indices(self, rm, rn, block_m: tl.constexpr, block_n: tl.constexpr):
        """Pointers and in-bounds mask for rows ``rm`` [block_m] and columns ``rn`` [block_n] of this tensor."""
        mask = (rm[:, None] < self.M) & (rn[None, :] < self.N)
        return self.ptr + _tile_offsets(rm, rn, self.stride_m, self.stride_n, block_m, block_n), mask

    def offset_tile_ptr(self, tile, offset_m=0, offset_n=0, src_mask=None):
        """Pointers to ``tile`` moved by ``offset_m`` rows and ``offset_n`` columns, and the in-bounds mask (and
        ``src_mask`` where given): where rank r's tile lands in a gathered tensor."""
        rm, rn = tile.indices()
        ptrs, mask = self.tile_ptr_from_indices(rm + offset_m, rn + offset_n, tile.block_m, tile.block_n)
        if src_mask is not None:
            mask = mask & src_mask
        return ptrs, mask

    def offset(self, offset_m=0, offset_n=0):
        """The same sizes and strides at ``ptr`` moved by ``offset_m`` rows and ``offset_n`` columns."""
        return TensorView(offset_ptr(self.ptr, self.stride_m, self.stride_n, offset_m, offset_n), self.M, self.N,
                          self.stride_m, self.stride_n)

    def number_of_tiles(self, block_m, block_n):
        """How many ``block_m x block_n`` tiles cover the tensor."""
        return tl.cdiv(self.M, block_m) * tl.cdiv(self.N, block_n)


def _methods(body):
    return {name: fn for name, fn in vars(body).items() if not name.startswith("_")}


def _plain(name, init, body, doc):
    cls = type(name, (), {"__init__": init, "__doc__": doc})
    for method, fn in _methods(body).items():
        setattr(cls, method, fn)
    return cls


def _aggregate(name, fields, init, body, doc):
    from triton.language.core import _aggregate as aggregate

    cls = type(name, (), {"__init__": triton.constexpr_function(init), "__annotations__": fields, "__doc__": doc})
    for method, fn in _methods(body).items():
        setattr(cls, method, triton.jit(fn))
    return aggregate(cls)


# The constructors below run at compile time (``triton.constexpr_function``), whose bodies may reference nothing
# but Triton and builtins: hence no shared helper. A field that holds a value takes a tensor, or a constexpr where
# the kernel passed a constant (a size of 1, a stride the launcher specialised); the arithmetic accepts both.


def _tile_view_init(self, pid_m, pid_n, block_m, block_n):
    self.pid_m = pid_m if isinstance(pid_m, tl.tensor) else tl.constexpr(pid_m)
    self.pid_n = pid_n if isinstance(pid_n, tl.tensor) else tl.constexpr(pid_n)
    self.block_m = tl.constexpr(block_m)
    self.block_n = tl.constexpr(block_n)


def _tile_init(self, pid_m, pid_n, block_m, block_n, data):
    self.pid_m = pid_m if isinstance(pid_m, tl.tensor) else tl.constexpr(pid_m)
    self.pid_n = pid_n if isinstance(pid_n, tl.tensor) else tl.constexpr(pid_n)
    self.block_m = tl.constexpr(block_m)
    self.block_n = tl.constexpr(block_n)
    self.data = data


def _tensor_view_init(self, ptr, M, N, stride_m, stride_n):
    self.ptr = ptr
    self.M = M if isinstance(M, tl.tensor) else tl.constexpr(M)
    self.N = N if isinstance(N, tl.tensor) else tl.constexpr(N)
    self.stride_m = stride_m if isinstance(stride_m, tl.tensor) else tl.constexpr(stride_m)
    self.stride_n = stride_n if isinstance(stride_n, tl.tensor) else tl.constexpr(stride_n)


_TILE_VIEW_DOC = """Where a tile sits: tile coordinates ``pid_m, pid_n`` (values) and block sizes ``block_m, block_n``
(constexpr). Methods ``layout(M, N)`` and ``indices()``."""
_TILE_DOC = """A ``TileView`` with the tile's values: ``data`` [block_m, block_n], in registers (a GEMM's tile, a
loaded tile). The tile collectives that reduce or scatter take what they send from ``data``."""
_TENSOR_VIEW_DOC = """A 2-D tensor as a kernel sees it: ``ptr``, sizes ``M, N``, strides ``stride_m, stride_n`` (in
elements). Methods ``tile_ptr(tile)``, ``tile_ptr_from_indices``, ``offset_tile_ptr``, ``offset``,
``number_of_tiles``. Build one with ``make_tensor_view`` from kernel arguments of any kind."""
_VALUE = (tl.tensor, tl.constexpr)
_TILE_VIEW_FIELDS = {"pid_m": _VALUE, "pid_n": _VALUE, "block_m": tl.constexpr, "block_n": tl.constexpr}
_TENSOR_VIEW_FIELDS = {"ptr": tl.tensor, **{name: _VALUE for name in ("M", "N", "stride_m", "stride_n")}}

if INTERPRETED:
    TileView = _plain("TileView", _tile_view_init, _TileMethods, _TILE_VIEW_DOC)
    Tile = _plain("Tile", _tile_init, _TileMethods, _TILE_DOC)
    TensorView = _plain("TensorView", _tensor_view_init, _TensorViewMethods, _TENSOR_VIEW_DOC)
else:
    TileView = _aggregate("TileView", _TILE_VIEW_FIELDS, _tile_view_init, _TileMethods, _TILE_VIEW_DOC)
    Tile = _aggregate("Tile", {**_TILE_VIEW_FIELDS, "data": tl.tensor}, _tile_init, _TileMethods, _TILE_DOC)
    TensorView = _aggregate("TensorView", _TENSOR_VIEW_FIELDS, _tensor_view_init, _TensorViewMethods,
                            _TENSOR_VIEW_DOC)


# Upstream's all_reduce variant codes, in its order.
ALL_REDUCE_VARIANTS = ("atomic", "ring", "one_shot", "two_shot", "spinlock")


def _config_init(self, variant_code, locks_ptr):
    code = tl.core._unwrap_if_constexpr(variant_code)
    if code not in range(len(ALL_REDUCE_VARIANTS)):
        raise ValueError(f"iris.x.AllReduceConfig: variant_code {code!r} is not one of 0..4 "
                         f"({', '.join(f'{i}={v}' for i, v in enumerate(ALL_REDUCE_VARIANTS))})")
    self.variant_code = tl.constexpr(code)
    self.locks_ptr = locks_ptr


_CONFIG_DOC = """Which tile all_reduce a kernel runs (``variant_code``: 0 atomic, 1 ring, 2 one_shot, 3 two_shot,
4 spinlock; constexpr) and its locks (``locks_ptr``, one int32 per tile on the heap; any tensor for variants
without locks). ``all_reduce(tile, src_view, dst_view, config, ctx)`` dispatches on it at compile time."""


class _NoMethods:
    pass


if INTERPRETED:
    AllReduceConfig = _plain("AllReduceConfig", _config_init, _NoMethods, _CONFIG_DOC)
else:
    AllReduceConfig = _aggregate("AllReduceConfig", {"variant_code": tl.constexpr, "locks_ptr": tl.tensor},
                                 _config_init, _NoMethods, _CONFIG_DOC)

__all__ = ["TileView", "Tile", "TensorView", "AllReduceConfig", "DeviceContext", "tile_layout", "tile_ptr",
           "offset_ptr", "make_tensor_view", "ALL_REDUCE_VARIANTS"]
