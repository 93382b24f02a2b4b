"""``iris.mem.gluon``, upstream Iris's module path: the Gluon device context. Generated from ``iris/upstream.py``."""

from iris.device.gluon import IrisDeviceCtx as Context, IrisDeviceCtx

__all__ = ["Context", "IrisDeviceCtx"]
