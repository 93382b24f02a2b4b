"""``iris.device.triton``: upstream Iris's module path for the Triton device context (``context``)."""
