"""``iris.copy_engine``, upstream Iris's module path: the copy engine from one import: the Tile that ctx.put_tile takes,
host address translation for its to_ptr, and the device operations. Generated from ``iris/upstream.py``."""

from iris.device.copy_engine import (put_async, quiet, put_signal, put_signal_rect, wait_then_put_rect,
                                     wait_then_put_signal_rect)
from iris.host.copy_engine.api import Tile, ENGINE_NAMES
from iris.host.memory.peers import peer_address

__all__ = ["Tile", "ENGINE_NAMES", "peer_address", "put_async", "quiet", "put_signal", "put_signal_rect",
           "wait_then_put_rect", "wait_then_put_signal_rect"]
