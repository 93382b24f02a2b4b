"""``iris.logging``: upstream Iris's module path for the logger, its level constants and its formatter."""

from iris.host.logging import DEBUG, ERROR, INFO, WARNING, IrisFormatter, logger, set_logger_level

__all__ = ["logger", "set_logger_level", "IrisFormatter", "DEBUG", "INFO", "WARNING", "ERROR"]
