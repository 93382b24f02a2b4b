"""torch.distributed backend ``"iris"``: importing this package registers it (``process_group.py``)."""

from iris.distributed.process_group import IrisProcessGroup, Work, get_context, set_context
from iris.distributed.staging import staging_for

__all__ = ["IrisProcessGroup", "Work", "set_context", "get_context", "staging_for"]
