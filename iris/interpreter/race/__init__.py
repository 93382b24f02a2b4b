"""The cpu backend's happens-before race detector (``IRIS_SANITIZE=race``); ``docs/design.md``, "The race detector"."""
