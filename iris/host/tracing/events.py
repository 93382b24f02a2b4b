"""Upstream Iris's module path for the trace event table: ``from iris.host.tracing.events import TraceEvent``
(the one defined in ``iris/device/trace_events.py``)."""

from iris.device.trace_events import TraceEvent

__all__ = ["TraceEvent"]
