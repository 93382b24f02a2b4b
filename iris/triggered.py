"""``iris.triggered``, upstream Iris's module path: copy-engine transfers that kernels release. Generated from
``iris/upstream.py``."""

from iris.device.triggered import publish, arrived, wait
from iris.host.copy_engine.triggered import TriggeredPlan, State, Batch, Segment, whole, chunks

__all__ = ["TriggeredPlan", "State", "Batch", "Segment", "whole", "chunks", "publish", "arrived", "wait"]
