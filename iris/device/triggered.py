"""The device side of a ``TriggeredPlan`` (``iris/host/copy_engine/triggered.py``): a producer publishes a batch, a
consumer waits for a peer's batch. ``view`` is what ``plan.begin_device_epoch()`` returned."""

import triton
import triton.language as tl


@triton.jit
def _table(view, word: tl.constexpr):
    return tl.cast(tl.load(view + word), tl.pointer_type(tl.int32))


@triton.jit
def publish(view, batch):
    """This program's contribution to ``batch`` is written: count it (release/sys, after a barrier so that every warp's
    stores are covered). The copy engine moves the batch once all its contributors have published."""
    tl.debug_barrier()
    tl.atomic_add(_table(view, 3) + batch, 1, sem="release", scope="sys")


@triton.jit
def arrived(view, batch):
    """True once a peer's ``batch`` has landed in our buffer (acquire/sys: the data is visible after it)."""
    return tl.atomic_add(_table(view, 4) + batch, 0, sem="acquire", scope="sys") >= 1


@triton.jit
def wait(view, batch):
    """Spin until ``arrived(view, batch)``; the program must not be one the batch's producer waits for."""
    while tl.atomic_add(_table(view, 4) + batch, 0, sem="acquire", scope="sys") < 1:
        pass
