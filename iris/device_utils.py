"""``iris.device_utils``, upstream Iris's module path: device timers and topology a kernel can read (its older flat
path). Generated from ``iris/upstream.py``."""

from iris.device.utils import read_realtime, get_wall_clock, get_cu_id, get_xcc_id, get_se_id

__all__ = ["read_realtime", "get_wall_clock", "get_cu_id", "get_xcc_id", "get_se_id"]
