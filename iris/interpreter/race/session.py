"""Turning the race detector on and off for a context (``iris/host/sanitize.py`` calls these)."""

from iris.interpreter.race import current, host, kernels
from iris.interpreter.race.detector import Detector


def start(rank, world_size, bases, size, exchange, barrier, describe):
    """Collective: a detector over the heaps at ``bases`` (``size`` bytes each), made this process's current one,
    with the interpreter's and torch's hooks installed."""
    kernels.install()
    detector = Detector(rank, world_size, bases, size, exchange, barrier, describe)
    detector.mode = host.HeapAccesses()
    detector.mode.__enter__()
    current.detector = detector
    return detector


def stop(detector):
    """``detector`` hears nothing more."""
    if current.detector is detector:
        current.detector = None
    try:
        detector.mode.__exit__(None, None, None)
    except (AssertionError, RuntimeError):  # another mode entered after ours is still open: ours now passes through
        pass
