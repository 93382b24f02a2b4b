"""The detector of this process's open sanitized context, or None: what the interpreter's and torch's hooks ask
(``kernels.py``, ``host.py``) before they do anything."""

detector = None
