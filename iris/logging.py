"""Rank-aware logging under the ``iris`` logger: records print as ``HH:MM:SS LEVEL [Iris] [rank/world] message`` on
stderr (upstream Iris's newest format; ``[?/?]`` for a record no context logged).

Default level: WARNING, so errors and warnings (``ctx.error``, ``ctx.warning``, the library's notes about what it
ignores) are always seen, while ``ctx.info`` / ``ctx.debug`` stay quiet. ``IRIS_LOG_LEVEL`` (DEBUG, INFO, WARNING,
ERROR, or a number) or ``iris.set_logger_level`` change it; ``IRIS_LOG_LEVEL=INFO`` gives upstream Iris's
default. Not INFO by default: every rank of every process prints, so at 8 ranks one INFO line a call is 8 lines a
call in every program that uses the library; that is the application's choice to make, while an error that prints
nothing makes a failed check look like a pass.

The application's own logging configuration wins: when the root logger has handlers, records reach them by
propagation and the rank handler stays silent, so nothing prints twice. ``RankFormatter`` gives the same prefix
to a handler of the application's."""

import logging
import os

DEBUG = logging.DEBUG
INFO = logging.INFO
WARNING = logging.WARNING
ERROR = logging.ERROR

logger = logging.getLogger("iris")


class RankFormatter(logging.Formatter):
    """``HH:MM:SS LEVEL [Iris] [rank/world] message``, as upstream Iris prints: the rank and world of the context that
    logged the record, ``?`` for a record none did (a program's own ``iris.logger.info(...)``), and the module's name
    after them for a record marked ``iris_internal``."""

    def format(self, record):
        where = f"[{getattr(record, 'iris_rank', '?')}/{getattr(record, 'iris_num_ranks', '?')}]"
        if getattr(record, "iris_internal", False):
            where += f" [{record.module}]"
        return f"{self.formatTime(record, '%H:%M:%S')} {record.levelname:<5s} [Iris] {where} {record.getMessage()}"


IrisFormatter = RankFormatter  # upstream Iris's name


_LEVELS = {"DEBUG": DEBUG, "INFO": INFO, "WARNING": WARNING, "WARN": WARNING, "ERROR": ERROR}
DEFAULT_LEVEL = WARNING


def level_from_env(value=None):
    """The level ``IRIS_LOG_LEVEL`` names (a name or a number); the default when unset; ValueError otherwise."""
    value = os.environ.get("IRIS_LOG_LEVEL", "") if value is None else value
    text = value.strip().upper()
    if not text:
        return DEFAULT_LEVEL
    if text.lstrip("-").isdigit():
        return int(text)
    if text not in _LEVELS:
        raise ValueError(f"IRIS_LOG_LEVEL={value!r}: use DEBUG, INFO, WARNING or ERROR (or a number)")
    return _LEVELS[text]


def _app_has_no_handlers(record):
    return not logging.getLogger().handlers  # else the record reaches the application's handlers instead


_handler = None  # the rank-prefixed stderr handler


def add_rank_handler(stream=None):
    """Print the ``iris`` logger's records in ``RankFormatter``'s format on ``stream`` (stderr by default),
    unless the application configured handlers on the root logger. Once: a second call returns the handler
    already added (made at import)."""
    global _handler
    if _handler is None:
        _handler = logging.StreamHandler(stream)
        _handler.setFormatter(RankFormatter())
        _handler.addFilter(_app_has_no_handlers)
        logger.addHandler(_handler)
    return _handler


def set_logger_level(level: int | str) -> None:
    """Set the level of the ``iris`` logger (``iris.DEBUG``, ``iris.INFO``, ``iris.WARNING``, ``iris.ERROR``, or
    their names: ``"INFO"``) in this process, as ``IRIS_LOG_LEVEL`` does at import. Raises ``ValueError`` for an
    unknown level name and ``TypeError`` for a level that is neither an int nor a str (``logging.Logger.setLevel``'s).

    Example::

        before = iris.logger.level
        iris.set_logger_level(iris.INFO)  # ctx.info lines print from now on
        ctx.info("heap ready")  # 12:00:00 INFO  [Iris] [0/2] heap ready
        iris.set_logger_level(before)
    """
    logger.setLevel(level)
    add_rank_handler()


try:
    logger.setLevel(level_from_env())
except ValueError as bad:
    logger.setLevel(DEFAULT_LEVEL)
    add_rank_handler()
    logger.warning(f"{bad}; using WARNING")
add_rank_handler()


class RankLogger:
    """Mixin for objects that know their rank: ``self.info("...")`` logs with the rank prefix."""

    def _log(self, level, message):
        logger.log(level, message, extra={"iris_rank": self.get_rank(), "iris_num_ranks": self.get_num_ranks()})

    def debug(self, message: str) -> None:
        """Log ``message`` at DEBUG on the ``iris`` logger, prefixed with this rank (quiet unless the level is DEBUG:
        ``IRIS_LOG_LEVEL=DEBUG`` or ``iris.set_logger_level(iris.DEBUG)``).

        Example::

            ctx.debug(f"bases {ctx.get_heap_bases().tolist()}")  # 12:00:00 DEBUG [Iris] [0/2] bases [...]
        """
        self._log(DEBUG, message)

    def info(self, message: str) -> None:
        """Log ``message`` at INFO on the ``iris`` logger, prefixed with this rank (quiet unless the level is INFO or
        lower: ``IRIS_LOG_LEVEL=INFO`` or ``iris.set_logger_level(iris.INFO)``).

        Example::

            ctx.info(f"{world_size} ranks up")  # 12:00:00 INFO  [Iris] [0/2] 2 ranks up
        """
        self._log(INFO, message)

    def warning(self, message: str) -> None:
        """Log ``message`` at WARNING on the ``iris`` logger, prefixed with this rank (printed at the default level).

        Example::

            if ctx.get_cu_count() > ctx.get_agreed_cu_count():
                ctx.warning("ranks run on GPUs of different sizes: the grids fit the smallest")
        """
        self._log(WARNING, message)

    def error(self, message: str) -> None:
        """Log ``message`` at ERROR on the ``iris`` logger, prefixed with this rank (printed at the default level).

        Example::

            out = ctx.zeros(16)
            if not torch.isfinite(out).all():
                ctx.error("all_reduce gave non-finite values")
        """
        self._log(ERROR, message)
