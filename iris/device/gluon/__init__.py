"""Device side for Gluon: ``@gluon.jit`` code only (importing this imports Triton's Gluon)."""

from iris.device.gluon.context import IrisDeviceCtx

__all__ = ["IrisDeviceCtx"]
