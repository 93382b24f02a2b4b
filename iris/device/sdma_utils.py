"""Upstream Iris's module path ``iris.device.sdma_utils``: ``sdma_ep`` is the copy-engine endpoint a context with
``engines=("sdma",)`` drives. Here it is this platform's (``iris/host/copy_engines.py``); programs that set it to
None make the copy engine unavailable, as uninstalling upstream's AMD package does. AMD's SDMA packet emitters have
no NVIDIA equivalent (kernels cannot write copy-engine queues here) and are not provided."""

from iris.host import copy_engines as sdma_ep

__all__ = ["sdma_ep"]
