"""``iris.host.tracing.events``, upstream Iris's module path: the trace event table. Generated from
``iris/upstream.py``."""

from iris.device.trace_events import TraceEvent

__all__ = ["TraceEvent"]
