"""Upstream's ``iris.experimental``: the Gluon device API under its oldest path (``iris.experimental.iris_gluon``),
an alias of ``iris.device.gluon``."""
