"""``iris.gluon``, upstream Iris's module path: the Gluon device API's entry point. Generated from
``iris/upstream.py``."""

from iris.device.gluon import IrisDeviceCtx

__all__ = ["IrisDeviceCtx"]
