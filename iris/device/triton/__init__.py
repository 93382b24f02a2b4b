"""``iris.device.triton``, upstream Iris's module path: the Triton device context's package. Generated from
``iris/upstream.py``."""

from iris.device.triton import context

__all__ = ["context"]
