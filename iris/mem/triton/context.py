"""``iris.mem.triton.context``: upstream's device-context class, which is our ``iris.DeviceContext``."""

from iris.device.context import DeviceContext as Context

__all__ = ["Context"]
