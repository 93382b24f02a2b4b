"""``iris.mem.triton.ops``: upstream's device RMA and atomics, which are ``iris.device``'s."""

from iris.device.atomics import (atomic_add, atomic_and, atomic_cas, atomic_max, atomic_min, atomic_or, atomic_sub,
                                 atomic_xchg, atomic_xor)
from iris.device.rma import copy, get, load, put, store

__all__ = ["load", "store", "copy", "get", "put", "atomic_add", "atomic_sub", "atomic_cas", "atomic_xchg",
           "atomic_xor", "atomic_and", "atomic_or", "atomic_min", "atomic_max"]
