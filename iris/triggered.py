"""Upstream Iris's ``iris.triggered``: copy-engine transfers that kernels release, the fused ops' mechanism made
public (``iris/host/triggered.py``, ``iris/device/triggered.py``)."""

from iris.device.triggered import arrived, publish, wait
from iris.host.triggered import Batch, Segment, State, TriggeredPlan, chunks, whole

__all__ = ["TriggeredPlan", "State", "Batch", "Segment", "whole", "chunks", "publish", "arrived", "wait"]
