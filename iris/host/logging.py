"""Rank-aware logging: every record reads ``[Iris] [rank/world] message``."""

import logging

DEBUG = logging.DEBUG
INFO = logging.INFO
WARNING = logging.WARNING
ERROR = logging.ERROR

logger = logging.getLogger("iris")


class _RankFormatter(logging.Formatter):
    """``[Iris] [rank/world] message`` for records a context logged; ``[Iris] message`` for the others (a program's
    own ``iris.logger.info(...)``)."""

    def format(self, record):
        if not hasattr(record, "iris_rank"):
            return f"[Iris] {record.getMessage()}"
        return f"[Iris] [{record.iris_rank}/{getattr(record, 'iris_num_ranks', '?')}] {record.getMessage()}"


IrisFormatter = _RankFormatter  # upstream Iris's name


if not logger.handlers:
    _handler = logging.StreamHandler()
    _handler.setFormatter(_RankFormatter())
    logger.addHandler(_handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False


def set_logger_level(level):
    """Set the level of the ``iris`` logger (``iris.DEBUG``, ``iris.INFO``, ``iris.WARNING``, ``iris.ERROR``)."""
    logger.setLevel(level)


class RankLogger:
    """Mixin for objects that know their rank: ``self.info("...")`` logs with the rank prefix."""

    def _log(self, level, message):
        logger.log(level, message, extra={"iris_rank": self.get_rank(), "iris_num_ranks": self.get_num_ranks()})

    def debug(self, message):
        self._log(DEBUG, message)

    def info(self, message):
        self._log(INFO, message)

    def warning(self, message):
        self._log(WARNING, message)

    def error(self, message):
        self._log(ERROR, message)
