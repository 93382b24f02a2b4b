"""``iris.mem.triton.context``, upstream Iris's module path: the Triton device context. Generated from
``iris/upstream.py``."""

from iris.device.context import DeviceContext as Context

__all__ = ["Context"]
