"""Upstream's ``iris.experimental.iris_gluon``: ``IrisDeviceCtx`` from ``iris.device.gluon``."""

from iris.device.gluon import IrisDeviceCtx

__all__ = ["IrisDeviceCtx"]
