"""CUDA graph captures as the heap sees them: whether one is in progress, and when its graphs are gone.

A heap tensor allocated while a graph is captured holds bytes that the graph's kernels use on every replay, long
after the tensor itself is dropped, as torch's caching allocator keeps such blocks in the graph's private pool.
``current`` names the capture in progress (a ``GraphLife``, one per capture); the heap holds the bytes of the
tensors allocated during it until ``GraphLife.alive`` turns false, which happens once CUDA has destroyed the
captured graph and every executable graph instantiated from it (``torch.cuda.CUDAGraph.reset()``, or the graph
collected): a CUDA user object that the graph retains signals it then (``cuda_driver.when_graph_destroyed``).
"""

import torch

from iris.platform import cuda_driver
from iris.logging import logger


class GraphLife:
    """``alive`` while a graph of one capture may still replay: until ``destroyed()`` (None: until set false)."""

    def __init__(self, destroyed=None):
        self._destroyed = destroyed
        self._alive = True

    @property
    def alive(self):
        if self._alive and self._destroyed is not None and self._destroyed():
            self._alive = False
        return self._alive

    @alive.setter
    def alive(self, value):
        self._alive = value


_lives = {}  # capture id -> GraphLife, for the captures whose graphs may live


def current(device):
    """The capture in progress on ``device``'s current stream, or None. The cpu backend never captures; tests
    replace this function to make the heap see one."""
    if device.type != "cuda" or not torch.cuda.is_current_stream_capturing():
        return None
    capture_id, graph = cuda_driver.capture_info(torch.cuda.current_stream(device).cuda_stream)
    life = _lives.get(capture_id)
    if life is None:
        for gone in [c for c, other in _lives.items() if not other.alive]:
            del _lives[gone]
        try:
            life = GraphLife(cuda_driver.when_graph_destroyed(graph))
        except RuntimeError as e:  # the bytes allocated during this capture then stay held for the process's life
            life = GraphLife()
            logger.warning(f"heap: cannot learn when the graph of capture {capture_id} is destroyed ({e}); the heap "
                           "bytes allocated during it will not be reused")
        _lives[capture_id] = life
    return life
