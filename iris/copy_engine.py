"""The copy engine from one import: the ``Tile`` that ``ctx.put_tile`` takes, host address translation for its
``to_ptr``, and the device operations with upstream Iris's names (the host methods are on the context:
``ctx.put / put_tile / put_tiles / quiet``)."""

from iris.device.copy_engine import (put_async, put_signal, put_signal_rect, quiet, wait_then_put_rect,
                                     wait_then_put_signal_rect)
from iris.host.copy_engine import peer_address
from iris.host.copy_engines import ENGINE_NAMES, Tile

__all__ = ["Tile", "peer_address", "ENGINE_NAMES", "put_async", "quiet", "put_signal", "put_signal_rect",
           "wait_then_put_rect", "wait_then_put_signal_rect"]
