"""Reaching a peer's heap without iris's device API: the baselines' way in.

The baselines must move the same bytes as iris but the way a user would without the library, so they
need the peer's address of a heap tensor on the host: one subtraction and one addition over
``ctx.get_heap_bases()`` (``allocate_symmetric`` returns the same numbers). The copy-engine baseline wraps
that address in a torch tensor on our own device; ``view.copy_(src)`` is then a same-device contiguous copy,
which torch issues as one ``cudaMemcpyAsync(DeviceToDevice)`` on the current stream, and the driver runs it on
a copy engine over NVLink. It is graph-capturable (a memcpy node) and timed with events on our stream like
every other provider. The functions are the host copy-engine path's own (``iris/host/copy_engine.py``).
"""

from iris.host.copy_engine import peer_address, peer_view

__all__ = ["peer_address", "peer_view"]
