"""Upstream's ``iris.mem.gluon``: an alias of ``iris.device.gluon`` (``Context`` is ``IrisDeviceCtx``)."""

from iris.device.gluon import IrisDeviceCtx
from iris.device.gluon import IrisDeviceCtx as Context

__all__ = ["Context", "IrisDeviceCtx"]
