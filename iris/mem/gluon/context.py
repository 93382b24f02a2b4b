"""``iris.mem.gluon.context``, upstream Iris's module path: the Gluon device context. Generated from
``iris/upstream.py``."""

from iris.device.gluon.context import IrisDeviceCtx as Context

__all__ = ["Context"]
