"""``iris.experimental.iris_gluon``, upstream Iris's module path: the Gluon device context. Generated from
``iris/upstream.py``."""

from iris.device.gluon import IrisDeviceCtx

__all__ = ["IrisDeviceCtx"]
