"""``iris.iris``: upstream Iris's module path for the context class, its factory and the device API
(``from iris.iris import DeviceContext``). The package attribute ``iris.iris`` is the factory function, as
upstream's is; this module stays importable by its path."""

from iris.device import (DeviceContext, atomic_add, atomic_and, atomic_cas, atomic_max, atomic_min, atomic_or,
                         atomic_sub, atomic_xchg, atomic_xor, copy, get, load, put, store, translate)
from iris.host.context import Iris, iris

__all__ = [
    "Iris", "iris", "DeviceContext", "translate", "load", "store", "get", "put", "copy", "atomic_add", "atomic_sub",
    "atomic_xchg", "atomic_and", "atomic_or", "atomic_xor", "atomic_min", "atomic_max", "atomic_cas",
]
