"""iris: multi-GPU programming in Triton on a symmetric heap.

Importing iris chooses the backend (``IRIS_BACKEND``: cuda, simulation or cpu; automatic by default). On
the cpu backend it switches Triton to its interpreter and mends it (``iris/interpreter/``), so import iris before
anything imports triton. This module is the package's face: it picks the backend, installs the interpreter's changes
or the AMD launch options, and re-exports the public names.
"""

from iris.platform import backend as _backend  # first: may set TRITON_INTERPRET, before anything imports triton

if _backend.BACKEND == "cpu":
    from iris.interpreter import triton as _interpreter

    _interpreter.install(debug=_backend.DEBUG)  # before any module decorates a kernel
else:  # kernels written for upstream Iris pass AMD-only launch options, which Triton's CUDA launcher refuses
    from iris.platform import amd_options as _amd_options

    _amd_options.install()

from iris.errors import ClosedError, MismatchError, PeerError, RaceError, RankError, RankTimeoutError  # noqa: E402
from iris.host.timing import do_bench  # noqa: E402
from iris.device import (DeviceContext, atomic_add, atomic_and, atomic_cas, atomic_max, atomic_min,  # noqa: E402
                         atomic_or, atomic_sub, atomic_xchg, atomic_xor, copy, get, load, put, store, translate,
                         wait_until)
from iris.device.copy_engine import (put_signal, put_signal_rect, quiet, wait_then_put_rect,  # noqa: E402
                                     wait_then_put_signal_rect)
from iris.device.trace_events import TraceEvent  # noqa: E402
# the module iris/iris.py (upstream's path) loads first; the package attribute iris.iris then ends as the factory
from iris.iris import Iris, iris  # noqa: E402
from iris.host.launcher import RankPool, launch, run  # noqa: E402
from iris.host.memory.providers import (HeapProvider, SymmetricAddressMap, TorchSymmMemProvider,  # noqa: E402
                                        wrap_symmetric)
from iris.logging import DEBUG, ERROR, INFO, WARNING, logger, set_logger_level  # noqa: E402
from iris import tensor_creation, hip, mem  # noqa: E402  upstream's module paths (iris/upstream.py)
from iris.platform import private as _private  # noqa: E402
from iris.platform.device_info import get_device_id_for_rank  # noqa: E402
_private.warn_untested()  # a warning, once, if torch or triton is outside the tested versions

__version__ = "0.1.0"

__all__ = [
    "iris", "Iris", "DeviceContext", "translate", "load", "store", "get", "put", "copy", "atomic_add", "atomic_sub",
    "atomic_xchg", "atomic_and", "atomic_or", "atomic_xor", "atomic_min", "atomic_max", "atomic_cas", "do_bench",
    "launch", "run", "RankPool", "RankError", "RankTimeoutError", "PeerError", "MismatchError", "ClosedError", "RaceError",
    "set_logger_level",
    "logger", "DEBUG", "INFO", "WARNING", "ERROR", "TraceEvent", "tensor_creation", "quiet", "put_signal",
    "put_signal_rect", "wait_then_put_rect", "wait_then_put_signal_rect", "hip", "mem", "wait_until",
    "SymmetricAddressMap", "HeapProvider", "TorchSymmMemProvider", "wrap_symmetric", "get_device_id_for_rank",
]

# The subpackages, reached as attributes (``iris.ccl``, ``iris.x.Tile`` in a kernel) without importing them here:
# each loads on first use, as ``import iris.ccl`` would, so ``import iris`` stays as quick as it was.
_SUBPACKAGES = ("bench", "ccl", "compile", "copy_engine", "distributed", "experimental", "gluon", "models", "ops",
                "triggered", "x")


def __getattr__(name):
    if name in _SUBPACKAGES:
        import importlib

        return importlib.import_module(f"iris.{name}")
    raise AttributeError(f"module 'iris' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_SUBPACKAGES))
