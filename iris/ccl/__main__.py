"""``python -m iris.ccl``: the table of collectives, from their records (``docs/design.md``, "Adding a
collective")."""

from iris.ccl import record

print(record.table())
