"""The copy engines: the queues that drive them (``queue.py``), the public ``ctx.put / put_tile / put_tiles /
quiet`` (``api.py``), the proxy that serves kernels' requests (``proxy.py``), the fused ops' side-stream schedule
(``schedule.py``) and transfers that kernels release (``triggered.py``)."""
