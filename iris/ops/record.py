"""One record per fused op: what it is, declared once at the end of its kernel's module, and read by everything built
on it.

From the records come ``ctx.ops``'s methods (``iris/ops/__init__.py``), the test that runs every op against its
reference (``tests/test_ops.py``), the check that the ``torch.ops.iris`` op each names exists and that every fused
op of ``torch.ops.iris`` is claimed (``tests/test_records.py``), and the table of fused ops in ``docs/api/ops.md``
(printed by ``python -m iris.ops``). The records live beside the collectives' (``iris/ccl/record.py``) and are filed
the same way: a name once.
"""

import dataclasses
import re
from typing import Callable, Optional

from iris.ccl.record import file

REGISTRY = {}  # name -> FusedOp, in declaration order

_OPERAND = re.compile(r"(A|B|out) \[([^\]]*)\]")


@dataclasses.dataclass(frozen=True)
class FusedOp:
    """What one fused GEMM + communication op is.

    ``name``: ``ctx.ops.<name>``, and the function ``run(ctx, out, a, b, bias=None, group=None, config=None)`` the
    method calls with the context. ``reference``: its float64 torch form in ``iris/ops/reference.py``,
    ``reference(a, b, rank)`` with ``a`` and ``b`` every rank's operands (a list, or one tensor where every rank
    holds the same). ``summary``: one line for the docs' table. ``layout``: the shapes of this rank's operands and
    of ``out`` in the group's size ``W``, e.g. ``"A [M, K / W], B [K / W, N], out [M, N]"`` (the tests build
    their operands from it). ``compile_op``: the ``torch.ops.iris`` op that runs it (``iris/compile/functional.py``),
    or None."""

    name: str
    run: Callable
    reference: Callable
    summary: str
    layout: str
    compile_op: Optional[str] = None

    @property
    def names(self):
        return (self.name,)

    def shapes(self, M, N, K, W):
        """``(A, B, out)`` shapes of one rank's call, from ``layout``; ``ValueError`` when a size does not divide."""
        found = dict(_OPERAND.findall(self.layout))
        sizes = {"M": M, "N": N, "K": K}

        def extent(term):
            name, _, divisor = (part.strip() for part in term.partition("/"))
            if divisor and sizes[name] % W:
                raise ValueError(f"{self.name}: {name} = {sizes[name]} does not split into {W} slices")
            return sizes[name] // W if divisor else sizes[name]

        return tuple(tuple(extent(term) for term in found[operand].split(",")) for operand in ("A", "B", "out"))


def declare(name, run, reference, summary, layout, **fields):
    """File the record of a fused op (once per name)."""
    return file(REGISTRY, FusedOp(name, run, reference, summary, layout, **fields))


def records():
    """Every record, in declaration order."""
    return list(REGISTRY.values())


def table():
    """The docs' table of fused ops, from the records (``docs/api/ops.md``)."""
    rows = ["| `ctx.ops.` | what it computes | this rank's operands | `torch.ops.iris` |", "| --- | --- | --- | --- |"]
    for record in sorted(records(), key=lambda r: r.name):
        rows.append(f"| `{record.name}` | {record.summary} | {record.layout} | "
                    f"{f'`{record.compile_op}`' if record.compile_op else '-'} |")
    return "\n".join(rows)
