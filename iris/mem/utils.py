"""``iris.mem.utils``, upstream Iris's module path: device timers and topology a kernel can read. Generated from
``iris/upstream.py``."""

from iris.device.utils import read_realtime, get_cu_id, get_xcc_id

__all__ = ["read_realtime", "get_cu_id", "get_xcc_id"]
