"""Device side: ``@triton.jit`` functions only."""

from iris.device.atomics import (atomic_add, atomic_and, atomic_cas, atomic_max, atomic_min, atomic_or, atomic_sub,
                                 atomic_xchg, atomic_xor)
from iris.device.context import DeviceContext
from iris.device.rma import copy, get, load, put, store
from iris.device.sync import wait_until
from iris.device.translate import translate

__all__ = [
    "translate", "load", "store", "get", "put", "copy", "atomic_add", "atomic_sub", "atomic_xchg", "atomic_and",
    "atomic_or", "atomic_xor", "atomic_min", "atomic_max", "atomic_cas", "DeviceContext", "wait_until",
]
