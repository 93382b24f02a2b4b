"""``iris.context``, upstream Iris's module path: the device contexts of one of upstream's layouts. Generated from
``iris/upstream.py``."""

import importlib

from iris.device.context import DeviceContext as TritonContext

_LAZY = {
    "GluonContext": ("iris.device.gluon", "IrisDeviceCtx"),
}


def __getattr__(name):
    if name in _LAZY:
        module, attribute = _LAZY[name]
        return getattr(importlib.import_module(module), attribute)
    raise AttributeError(f"module 'iris.context' has no attribute {name!r}")


__all__ = ["TritonContext", "GluonContext"]
