"""``iris.device.triton.context``: upstream's path to the device-context class, which is our ``iris.DeviceContext``."""

from iris.device.context import DeviceContext

__all__ = ["DeviceContext"]
