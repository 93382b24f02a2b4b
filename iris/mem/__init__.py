"""``iris.mem``, upstream Iris's module path: upstream's newest layout of the device API. Generated from
``iris/upstream.py``."""

from iris.mem import triton, utils

__all__ = ["triton", "utils"]
