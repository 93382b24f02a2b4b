"""The detector of this process's open sanitized context, or None: what the interpreter's and torch's hooks ask
(``kernels.py``, ``host.py``) before they do anything; and ``unheard``, for the library's own recovery writes."""

import contextlib

detector = None


@contextlib.contextmanager
def unheard():
    """The calling thread's accesses inside are not the program's: the library's writes that end every wait after a
    failure (``GroupTable.poison``), racy by design against the failed call's last signals, which they outrun or
    follow, and either way end the waits."""
    d = detector
    if d is None or d.paused:
        yield
        return
    d._local.paused = True
    try:
        yield
    finally:
        d._local.paused = False
