"""Upstream Iris's newest module layout, ``iris.mem.*``: thin aliases onto our rooms (``iris.device``), so code
written against it (``from iris.mem.triton.context import Context``) runs unchanged. Nothing is defined here."""

from iris.mem import triton, utils

__all__ = ["triton", "utils"]
