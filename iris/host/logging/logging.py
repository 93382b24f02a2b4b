"""``iris.host.logging.logging``, upstream Iris's module path: the log formatter. Generated from
``iris/upstream.py``."""

from iris.logging import IrisFormatter, RankFormatter, logger

__all__ = ["IrisFormatter", "RankFormatter", "logger"]
