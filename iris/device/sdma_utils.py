"""``iris.device.sdma_utils``, upstream Iris's module path: the copy-engine endpoint a context with engines=('sdma',)
drives; a program that sets sdma_ep to None makes the copy engine unavailable, as uninstalling upstream's AMD package
does (AMD's SDMA packet emitters have no NVIDIA equivalent). Generated from ``iris/upstream.py``."""

from iris.host.copy_engine import api as sdma_ep

__all__ = ["sdma_ep"]
