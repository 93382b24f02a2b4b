"""``iris.mem.triton.ops``, upstream Iris's module path: the device RMA and atomics. Generated from
``iris/upstream.py``."""

from iris.device.atomics import (atomic_add, atomic_sub, atomic_cas, atomic_xchg, atomic_xor, atomic_and, atomic_or,
                                 atomic_min, atomic_max)
from iris.device.rma import load, store, copy, get, put

__all__ = ["load", "store", "copy", "get", "put", "atomic_add", "atomic_sub", "atomic_cas", "atomic_xchg", "atomic_xor",
           "atomic_and", "atomic_or", "atomic_min", "atomic_max"]
