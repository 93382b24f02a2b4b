"""``iris.experimental``, upstream Iris's module path: the Gluon device API under its oldest path. Generated from
``iris/upstream.py``."""

from iris.experimental import iris_gluon

__all__ = ["iris_gluon"]
