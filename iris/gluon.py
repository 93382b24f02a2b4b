"""Upstream Iris's Gluon entry point: ``from iris.gluon import IrisDeviceCtx`` (an alias of ``iris.device.gluon``)."""

from iris.device.gluon import IrisDeviceCtx

__all__ = ["IrisDeviceCtx"]
