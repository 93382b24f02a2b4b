"""``IRIS_SANITIZE=race`` (or ``iris.iris(..., sanitize="race")``): the cpu backend's happens-before race detector
(``iris/interpreter/race/``) over this context's heap, entered through the context (``ctx.sanitizer``).

The detector hears the kernels through the interpreter and the host's torch operations; the context tells it
what only the context knows: its host barriers, the heap bytes that allocation hands out again, and which
allocation a racing byte belongs to."""

import contextlib
import os
import weakref

from iris.errors import RaceError
from iris.host import distributed

MODES = ("race",)
# The reports of every sanitized context this process made, until they reach the program: ``ctx.close()`` raising
# them, or ``raise_undelivered`` (the launcher, after a rank's function returns; the process's exit otherwise).
_reports = []


def mode(sanitize, backend, caller="iris.iris"):
    """The sanitizer asked for by ``sanitize`` ("race", True for it, False or "" for none) or, when it is None, by
    ``IRIS_SANITIZE``: "race" or None."""
    asked = os.environ.get("IRIS_SANITIZE", "") if sanitize is None else sanitize
    if isinstance(asked, bool):
        asked = "race" if asked else ""
    asked = str(asked or "").strip().lower() or None
    if asked is None:
        return None
    if asked not in MODES:
        raise ValueError(f"{caller}: sanitize={asked!r} is not a sanitizer; use 'race' (IRIS_SANITIZE=race) or "
                         "leave it unset")
    if backend != "cpu":
        raise ValueError(f"{caller}: sanitize='race' runs on the cpu backend (IRIS_BACKEND=cpu), where every access "
                         f"passes through the interpreter; this context is on the {backend} backend")
    return asked


class RaceSanitizer:
    """The race detector of one context: collective to make (every rank maps every rank's shadow)."""

    def __init__(self, heap, rank, world_size, exchange, barrier):
        from iris.interpreter.race import session

        self._heap = heap
        # The detector and the exchange hook live in modules: through weak references, so that they do not keep
        # a dropped context (the heap holds the context) from being collected and closed
        self.detector = session.start(rank, world_size, heap.bases, heap.capacity, exchange, barrier,
                                      _weakly(self.describe, lambda heap_rank, byte, element_bytes=1: f"byte {byte}"))
        heap.on_release(self._forget)
        self._exchanges = {}
        self._exchange_hook = distributed.on_exchange = _weakly(self._exchange, lambda ranks: contextlib.nullcontext())
        self.reports = _Reports(rank, self.detector.races)
        if not _reports:
            import atexit

            atexit.register(_exit_nonzero_if_undelivered)
        _reports.append(self.reports)

    @property
    def races(self):
        """The reports so far, in order (each also printed to stderr as it happened)."""
        return list(self.detector.races)

    def host_barrier(self, ranks, generation):
        """A context manager around call ``generation`` of the host barrier of ``ranks``: what each member did
        before it happens before what every member does after it."""
        return self.detector.host_barrier((tuple(ranks), generation % 2))

    def _exchange(self, ranks):
        """An exchange of values among ``ranks`` (an all-gather, the group table's slot agreement): a host barrier
        to the detector. Each member makes the same exchanges in the same order, so the counts agree."""
        count = self._exchanges[ranks] = self._exchanges.get(ranks, 0) + 1
        return self.detector.host_barrier(("exchange", ranks, count % 2))

    def describe(self, heap_rank, byte, element_bytes=1):
        """Where byte ``byte`` of a heap lies: an element of an allocation (allocations agree across ranks), or the
        library's areas."""
        heap = self._heap
        if byte < heap.workspace_range[0]:
            return f"byte {byte} (the group sync flags)"
        if byte < heap.user_start:
            return f"byte {byte} (the library's workspaces)"
        used = heap.allocation_at(byte)
        if used is None:
            return f"byte {byte} (no live allocation)"
        start, size = used
        element = f"element {(byte - start) // element_bytes} ({element_bytes}-byte elements)" if element_bytes > 1 \
            else f"byte {byte - start}"
        return f"{element} of the {size}-byte allocation at heap offset {start}"

    def _forget(self, blocks):
        shared = self.detector.shared
        shadow = shared.heaps[self.detector.rank]
        with shared:
            for start, size in blocks:
                shared.forget(shadow, start, start + size)

    def close(self):
        """Stop hearing; raise ``iris.RaceError`` if races were reported while the context was open."""
        from iris.interpreter.race import session

        if distributed.on_exchange is self._exchange_hook:
            distributed.on_exchange = None
        session.stop(self.detector)
        self._heap = None  # the heap's release callback holds us: no cycle keeps a dropped context's heap mapped
        self.reports.raise_if_any("Iris.close")


def _weakly(method, otherwise):
    """``method`` through a weak reference to its object; ``otherwise`` once the object is gone."""
    ref = weakref.WeakMethod(method)

    def call(*args, **kwargs):
        bound = ref()
        return otherwise(*args, **kwargs) if bound is None else bound(*args, **kwargs)

    return call


class _Reports:
    """One context's race reports (the detector's list) and how many of them have been raised."""

    def __init__(self, rank, races):
        self.rank, self.races, self.delivered = rank, races, 0

    def raise_if_any(self, caller):
        new = self.races[self.delivered:]
        self.delivered = len(self.races)
        if new:
            raise RaceError(f"{caller}: {len(new)} data race(s) reported on rank {self.rank} (IRIS_SANITIZE=race); "
                            f"the first:\n{new[0]}", new)

    def undeliver(self, count):
        """A raise of ``count`` reports that never reached the program (``Iris.__del__`` swallows exceptions)."""
        self.delivered -= count


def raise_undelivered(caller):
    """Raise ``iris.RaceError`` for reports that no ``ctx.close()`` raised (contexts dropped or still open)."""
    for reports in _reports:
        reports.raise_if_any(caller)


def _exit_nonzero_if_undelivered():
    undelivered = sum(len(r.races) - r.delivered for r in _reports)
    if undelivered:
        import sys

        print(f"iris: {undelivered} data race(s) reported (IRIS_SANITIZE=race) and never raised; exiting with "
              "status 1", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(1)
