"""``iris.mem.utils``: upstream's device timers and topology queries, aliased onto ``iris.device.utils``."""

from iris.device.utils import get_cu_id, get_xcc_id, read_realtime

__all__ = ["read_realtime", "get_cu_id", "get_xcc_id"]
