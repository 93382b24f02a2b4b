"""Upstream Iris's ``iris.context`` (one of its layouts): ``GluonContext`` is ``iris.device.gluon.IrisDeviceCtx`` and
``TritonContext`` is ``iris.DeviceContext``; Gluon is imported only when ``GluonContext`` is asked for."""

from iris.device.context import DeviceContext as TritonContext


def __getattr__(name):
    if name == "GluonContext":
        from iris.device.gluon import IrisDeviceCtx

        return IrisDeviceCtx
    raise AttributeError(f"module 'iris.context' has no attribute {name!r}")


__all__ = ["GluonContext", "TritonContext"]
