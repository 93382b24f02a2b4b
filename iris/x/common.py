"""Device helpers the tile collectives share: the tile's number, the accumulation type, and the wait for a peer's
tile, which is the collectives' own wait (``iris.device.sync.wait_until``) on the peer's lock through ``translate``."""

import triton
import triton.language as tl

from iris.device.sync import wait_until
from iris.device.translate import translate


@triton.jit
def tile_id(tile, view):
    """The tile's number in row-major order over ``view``'s tiles: the index of its lock."""
    return tile.pid_m * tl.cdiv(view.N, tile.block_n) + tile.pid_n


@triton.jit
def widen(x):
    """``x`` in the type a sum of it accumulates in: fp32 for fp16 and bf16 (rounded once at the end), else its own."""
    if x.dtype == tl.float16 or x.dtype == tl.bfloat16:
        return x.to(tl.float32)
    else:
        return x


@triton.jit
def wait_for_peer(lock, epoch, rank, peer, heap_bases, what: tl.constexpr):
    """Spin until ``lock`` on ``peer``'s heap has reached ``epoch`` (wrap-safe, ``iris.device.sync.behind``): acquire
    at sys scope, so the peer's stores that its release of the lock covered are visible to the loads that follow.
    A lock that is set to 1 once has reached epoch 1; one raised by one per call reaches the call's number."""
    wait_until(translate(lock, rank, peer, heap_bases, op=what), epoch, rank, peer, what)
