"""``iris.hip``, upstream Iris's module path: the device queries upstream's examples call, answered for this platform.
Generated from ``iris/upstream.py``."""

from iris.platform.device_info import (count_devices, set_device, get_cu_count, get_num_xcc, get_wall_clock_rate,
                                       get_arch)

__all__ = ["count_devices", "set_device", "get_cu_count", "get_num_xcc", "get_wall_clock_rate", "get_arch"]
