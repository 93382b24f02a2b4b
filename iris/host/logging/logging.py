"""``iris.host.logging.logging``: upstream Iris's module path for its formatter, which is ours."""

from iris.host.logging import IrisFormatter, RankFormatter, logger

__all__ = ["IrisFormatter", "RankFormatter", "logger"]
