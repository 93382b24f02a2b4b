"""``iris.mem.triton``: upstream's Triton device API (``Context``, RMA, atomics) as aliases of ``iris.device``.
Upstream's tile types (``Tile``, ``TensorView``, ...) live in the tile API, ``iris.x``, and are forwarded to it."""

from iris.mem.triton.context import Context
from iris.mem.triton.ops import (atomic_add, atomic_and, atomic_cas, atomic_max, atomic_min, atomic_or, atomic_sub,
                                 atomic_xchg, atomic_xor, copy, get, load, put, store)

DeviceContext = Context  # upstream's older name for it
_TILE_NAMES = ("Tile", "TileView", "TensorView", "AllReduceConfig", "make_tensor_view", "tile_layout", "tile_ptr")


def __getattr__(name):
    if name in _TILE_NAMES:
        import importlib

        return getattr(importlib.import_module("iris.x"), name)
    raise AttributeError(f"module 'iris.mem.triton' has no attribute {name!r}")


__all__ = ["Context", "DeviceContext", "load", "store", "copy", "get", "put", "atomic_add", "atomic_sub",
           "atomic_cas", "atomic_xchg", "atomic_xor", "atomic_and", "atomic_or", "atomic_min", "atomic_max"]
