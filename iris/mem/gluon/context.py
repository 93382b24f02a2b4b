"""Upstream's ``iris.mem.gluon.context``: ``Context`` is ``iris.device.gluon.IrisDeviceCtx``."""

from iris.device.gluon.context import IrisDeviceCtx as Context

__all__ = ["Context"]
