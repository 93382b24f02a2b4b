"""``iris.host.logging``, upstream Iris's module path: the rank-aware logger. Generated from ``iris/upstream.py``."""

from iris.logging import logger, set_logger_level, IrisFormatter, RankFormatter, RankLogger, DEBUG, INFO, WARNING, ERROR

__all__ = ["logger", "set_logger_level", "IrisFormatter", "RankFormatter", "RankLogger", "DEBUG", "INFO", "WARNING",
           "ERROR"]
