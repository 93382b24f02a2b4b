"""iris: multi-GPU programming in Triton on a symmetric heap.

Importing iris chooses the backend (``IRIS_BACKEND``: cuda, simulation or cpu; automatic by default). On
the cpu backend it switches Triton to its interpreter, so import iris before anything imports triton.
"""

from iris.host import backend as _backend  # noqa: F401  (first: may set TRITON_INTERPRET)
from iris.host.timing import do_bench
from iris.device import (DeviceContext, atomic_add, atomic_and, atomic_cas, atomic_max, atomic_min, atomic_or,
                         atomic_sub, atomic_xchg, atomic_xor, copy, get, load, put, store, translate)
from iris.device.copy_engine import (put_signal, put_signal_rect, quiet, wait_then_put_rect,
                                     wait_then_put_signal_rect)
from iris.device.trace_events import TraceEvent
# iris/iris.py (upstream's module path) loads first, so that the package attribute iris.iris ends as the factory
from iris import iris as _module_path  # noqa: F401
from iris.host.context import Iris, iris
from iris.host.distributed import RankTimeoutError
from iris.host.launcher import RankError, RankPool, launch, run
from iris.host.logging import DEBUG, ERROR, INFO, WARNING, logger, set_logger_level
from iris.host.watchdog import PeerError
from iris import tensor_creation
from iris.host import private as _private

_private.warn_untested()  # a warning, once, if torch or triton is outside the tested versions

__version__ = "0.1.0"

__all__ = [
    "iris", "Iris", "DeviceContext", "translate", "load", "store", "get", "put", "copy", "atomic_add", "atomic_sub",
    "atomic_xchg", "atomic_and", "atomic_or", "atomic_xor", "atomic_min", "atomic_max", "atomic_cas", "do_bench",
    "launch", "run", "RankPool", "RankError", "RankTimeoutError", "PeerError", "set_logger_level", "logger", "DEBUG",
    "INFO", "WARNING", "ERROR", "TraceEvent", "tensor_creation", "quiet", "put_signal", "put_signal_rect",
    "wait_then_put_rect", "wait_then_put_signal_rect",
]
