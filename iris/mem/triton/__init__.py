"""``iris.mem.triton``, upstream Iris's module path: the Triton device API; its tile types are the tile API's (iris.x).
Generated from ``iris/upstream.py``."""

import importlib

from iris.device.atomics import (atomic_add, atomic_sub, atomic_cas, atomic_xchg, atomic_xor, atomic_and, atomic_or,
                                 atomic_min, atomic_max)
from iris.device.context import DeviceContext as Context, DeviceContext
from iris.device.rma import load, store, copy, get, put

_LAZY = {
    "Tile": ("iris.x", "Tile"),
    "TileView": ("iris.x", "TileView"),
    "TensorView": ("iris.x", "TensorView"),
    "AllReduceConfig": ("iris.x", "AllReduceConfig"),
    "make_tensor_view": ("iris.x", "make_tensor_view"),
    "tile_layout": ("iris.x", "tile_layout"),
    "tile_ptr": ("iris.x", "tile_ptr"),
}


def __getattr__(name):
    if name in _LAZY:
        module, attribute = _LAZY[name]
        return getattr(importlib.import_module(module), attribute)
    raise AttributeError(f"module 'iris.mem.triton' has no attribute {name!r}")


__all__ = ["Context", "DeviceContext", "load", "store", "copy", "get", "put", "atomic_add", "atomic_sub", "atomic_cas",
           "atomic_xchg", "atomic_xor", "atomic_and", "atomic_or", "atomic_min", "atomic_max", "Tile", "TileView",
           "TensorView", "AllReduceConfig", "make_tensor_view", "tile_layout", "tile_ptr"]
