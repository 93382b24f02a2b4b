"""``iris.device.sdma_utils``, upstream Iris's module path: the copy-engine endpoint a context with engines=('sdma',)
drives: our copy engine's host API, always present (upstream's is None without its AMD package; AMD's SDMA packet
emitters have no NVIDIA equivalent). Generated from ``iris/upstream.py``."""

from iris.host.copy_engine import api as sdma_ep

__all__ = ["sdma_ep"]
