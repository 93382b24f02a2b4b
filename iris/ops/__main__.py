"""``python -m iris.ops``: the table of fused ops, from their records (``docs/api/ops.md``)."""

from iris.ops import record  # the package's import files the records

print(record.table())
