"""Rank-aware logging under the ``iris`` logger, as the standard library advises for a library: a
``NullHandler`` and nothing else at import, propagation left on, so the application's logging configuration
decides what is shown. ``iris.set_logger_level`` (or ``add_rank_handler``) adds a handler that prints
``[Iris] [rank/world] message``; ``RankFormatter`` gives the same prefix to a handler of the application's."""

import logging

DEBUG = logging.DEBUG
INFO = logging.INFO
WARNING = logging.WARNING
ERROR = logging.ERROR

logger = logging.getLogger("iris")


class RankFormatter(logging.Formatter):
    """``[Iris] [rank/world] message`` for records a context logged; ``[Iris] message`` for the others (a program's
    own ``iris.logger.info(...)``)."""

    def format(self, record):
        if not hasattr(record, "iris_rank"):
            return f"[Iris] {record.getMessage()}"
        return f"[Iris] [{record.iris_rank}/{getattr(record, 'iris_num_ranks', '?')}] {record.getMessage()}"


IrisFormatter = RankFormatter  # upstream Iris's name


logger.addHandler(logging.NullHandler())  # the library's own: records go nowhere until someone asks for them
_handler = None  # the rank-prefixed stderr handler, added by ``set_logger_level`` / ``add_rank_handler``


def add_rank_handler(stream=None):
    """Print the ``iris`` logger's records as ``[Iris] [rank/world] message`` on ``stream`` (stderr by default).
    Once: a second call returns the handler already added. ``set_logger_level`` calls it, so that asking for a
    level is enough to see the messages; an application that configures logging itself need not call either
    (the records also reach the root logger's handlers)."""
    global _handler
    if _handler is None:
        _handler = logging.StreamHandler(stream)
        _handler.setFormatter(RankFormatter())
        logger.addHandler(_handler)
    return _handler


def set_logger_level(level):
    """Set the level of the ``iris`` logger (``iris.DEBUG``, ``iris.INFO``, ``iris.WARNING``, ``iris.ERROR``) and
    print its records with the rank prefix (``add_rank_handler``)."""
    logger.setLevel(level)
    add_rank_handler()


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
