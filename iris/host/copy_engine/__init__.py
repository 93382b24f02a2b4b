"""The copy engines: the lanes that drive them, a CUDA stream or a host thread behind one interface (``lanes.py``),
the fused ops' copy queue (``queue.py``), the public ``ctx.put / put_tile / put_tiles / quiet`` (``api.py``), the
proxy that serves kernels' requests (``proxy.py``), the fused ops' side-stream schedule (``schedule.py``) and
transfers that kernels release (``triggered.py``)."""
