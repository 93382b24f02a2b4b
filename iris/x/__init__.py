"""``iris.x``: the tile API. A kernel walks its own tiles and calls a tile collective on each: tile views and tensor
views (``core``), all_reduce in five schedules, all_gather, gather, all_to_all and reduce_scatter, on the same
device functions as ``iris.ccl`` (``iris.device``: one translate, one wait)."""

from iris.x.all_gather import all_gather
from iris.x.all_reduce import (all_reduce, all_reduce_atomic, all_reduce_one_shot, all_reduce_ring,
                               all_reduce_spinlock, all_reduce_two_shot)
from iris.x.all_to_all import all_to_all
from iris.x.core import (AllReduceConfig, DeviceContext, TensorView, Tile, TileView, make_tensor_view, offset_ptr,
                         tile_layout, tile_ptr)
from iris.x.gather import gather
from iris.x.reduce_scatter import reduce_scatter

__all__ = [
    "Tile", "TileView", "TensorView", "make_tensor_view", "DeviceContext", "AllReduceConfig", "tile_layout",
    "tile_ptr", "offset_ptr", "all_reduce", "all_reduce_atomic", "all_reduce_ring", "all_reduce_two_shot",
    "all_reduce_one_shot", "all_reduce_spinlock", "gather", "all_gather", "all_to_all", "reduce_scatter",
]
