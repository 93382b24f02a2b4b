"""Every collective's record against the code (``iris/ccl/record.py``): its reference and its form across nodes exist,
the torch bindings it names exist, every collective method of the ``"iris"`` process group and every collective op
of ``torch.ops.iris`` is claimed by a record, ``ctx.ccl`` has every name, and ``docs/design.md``'s table is the
records'. The fused ops' records (``iris/ops/record.py``) the same way: reference, layout, compile op, ``ctx.ops``,
``docs/api/ops.md``'s table. Nothing here runs a kernel (``tests/test_ops.py`` runs every fused record)."""

import inspect
import pathlib

import pytest
import torch

import iris.ccl
import iris.compile  # noqa: F401  (registers torch.ops.iris)
import iris.ops
from iris.ccl import record, reference
from iris.ops import record as fused_record
from iris.ops import reference as fused_reference
from iris.ccl.multinode import hierarchical
from iris.distributed.process_group import IrisProcessGroup

DOCS = pathlib.Path(__file__).resolve().parent.parent / "docs"
DESIGN = DOCS / "design.md"
# the process group's methods that are not a collective of ctx.ccl
NOT_COLLECTIVES = {"barrier", "getBackendName", "group_name"}


def problems(collective):
    """What is missing from ``collective``'s record, one line each."""
    found = []
    if getattr(reference, collective.reference.__name__, None) is not collective.reference:
        found.append(f"{collective.name}: its reference {collective.reference.__name__} is not in "
                     "iris/ccl/reference.py")
    if not callable(getattr(hierarchical, collective.hierarchical, None)):
        found.append(f"{collective.name}: no {collective.hierarchical!r} in iris/ccl/multinode/hierarchical.py (its "
                     "form across nodes)")
    if "ctx" not in list(inspect.signature(collective.run).parameters)[:1]:
        found.append(f"{collective.name}: run takes the context first")
    for method in collective.process_group:
        if not callable(getattr(IrisProcessGroup, method, None)):
            found.append(f"{collective.name}: the process group has no method {method!r}")
    if collective.compile_op and not hasattr(torch.ops.iris, collective.compile_op):
        found.append(f"{collective.name}: torch.ops.iris has no op {collective.compile_op!r}")
    if not collective.summary:
        found.append(f"{collective.name}: no summary for the docs' table")
    return found


@pytest.mark.parametrize("name", [r.name for r in record.records()])
def test_each_record_is_complete(name):
    assert problems(record.REGISTRY[name]) == []


def test_an_incomplete_record_is_named():
    broken = record.Collective("gather_v", iris.ccl.gather, reference.gather, "", "gather_v",
                               process_group=("gatherv",), compile_op="gather_v")
    found = "\n".join(problems(broken))
    for piece in ("no 'gather_v' in iris/ccl/multinode/hierarchical.py", "no method 'gatherv'",
                  "no op 'gather_v'", "no summary"):
        assert piece in found, found


def test_a_name_is_declared_once():
    with pytest.raises(ValueError, match="'all_reduce' is declared twice"):
        record.declare("all_reduce", iris.ccl.all_reduce, reference.all_reduce, "again", "all_reduce")


def test_every_binding_is_claimed():
    # a method is claimed under any of its names (torch's newer names are the same functions); one that only
    # raises ("not supported by the iris backend") runs nothing
    claimed = {getattr(IrisProcessGroup, m) for r in record.records() for m in r.process_group}
    running = {name for name, value in vars(IrisProcessGroup).items() if callable(value) and not name.startswith("_")
               and "_unsupported" not in value.__qualname__ and name not in NOT_COLLECTIVES}
    assert {name for name in running if getattr(IrisProcessGroup, name) not in claimed} == set(), \
        "process-group methods no record claims"
    ops = {r.compile_op for r in record.records()}
    collective_ops = {name for name in iris.compile.__all__ if hasattr(torch.ops.iris, name)
                      and [a.name for a in getattr(torch.ops.iris, name).default._schema.arguments] == ["x"]}
    assert collective_ops - ops == set(), "torch.ops.iris collectives no record claims"


class Context:
    num_nodes = 1


def test_ctx_ccl_binds_every_name():
    ccl = iris.ccl.CCL(Context())
    for name, collective in record.REGISTRY.items():
        method = getattr(ccl, name)
        assert method.__name__ == name and method.__doc__ == collective.run.__doc__
        # help(ctx.ccl) shows the collective's own signature, self in the context's place
        assert list(inspect.signature(getattr(iris.ccl.CCL, name)).parameters) == \
            ["self", *list(inspect.signature(collective.run).parameters)[1:]]
    assert set(record.REGISTRY) <= set(dir(ccl))


def test_the_docs_table_is_the_records():
    assert record.table() in DESIGN.read_text(), "docs/design.md's table of collectives: paste python -m iris.ccl"


# ---------------------------------------------------------------------- the fused ops
def fused_problems(op):
    """What is missing from fused op ``op``'s record, one line each."""
    found = []
    if getattr(fused_reference, op.reference.__name__, None) is not op.reference:
        found.append(f"{op.name}: its reference {op.reference.__name__} is not in iris/ops/reference.py")
    elif list(inspect.signature(op.reference).parameters) != ["a", "b", "rank"]:
        found.append(f"{op.name}: its reference takes (a, b, rank)")
    if list(inspect.signature(op.run).parameters)[:4] != ["ctx", "out", "a", "b"]:
        found.append(f"{op.name}: run takes (ctx, out, a, b, ...)")
    try:
        a, b, out = op.shapes(M=8, N=12, K=16, W=2)
        if len(a) != 2 or len(b) != 2 or len(out) != 2 or a[1] != b[0]:
            found.append(f"{op.name}: layout {op.layout!r} gives A {a}, B {b}: not a product")
    except (KeyError, ValueError) as error:
        found.append(f"{op.name}: layout {op.layout!r} does not read as 'A [..], B [..], out [..]' ({error})")
    if op.compile_op and not hasattr(torch.ops.iris, op.compile_op):
        found.append(f"{op.name}: torch.ops.iris has no op {op.compile_op!r}")
    if not op.summary:
        found.append(f"{op.name}: no summary for the docs' table")
    return found


@pytest.mark.parametrize("name", list(fused_record.REGISTRY))
def test_each_fused_record_is_complete(name):
    assert fused_problems(fused_record.REGISTRY[name]) == []


def test_an_incomplete_fused_record_is_named():
    broken = fused_record.FusedOp("matmul_gather", iris.ops.matmul_all_gather, reference.all_gather, "",
                                  "A [M, K], B [K / W]", compile_op="matmul_gather")
    found = "\n".join(fused_problems(broken))
    for piece in ("all_gather is not in iris/ops/reference.py", "does not read as", "no op 'matmul_gather'",
                  "no summary"):
        assert piece in found, found
    with pytest.raises(ValueError, match="'matmul_all_reduce' is declared twice"):
        fused_record.declare("matmul_all_reduce", iris.ops.matmul_all_reduce, fused_reference.matmul_all_reduce,
                             "again", "A [M, K], B [K, N], out [M, N]")


def test_every_fused_compile_op_is_claimed():
    claimed = {op.compile_op for op in fused_record.records()}
    fused = {name for name in iris.compile.__all__ if hasattr(torch.ops.iris, name)
             and [a.name for a in getattr(torch.ops.iris, name).default._schema.arguments] == ["a", "b"]}
    assert fused and fused - claimed == set(), "torch.ops.iris fused ops no record claims"


def test_ctx_ops_binds_every_name():
    ops = iris.ops.Ops(Context())
    for name, op in fused_record.REGISTRY.items():
        assert getattr(ops, name).__name__ == name and getattr(ops, name).__doc__ == op.run.__doc__
        assert list(inspect.signature(getattr(iris.ops.Ops, name)).parameters) == \
            ["self", *list(inspect.signature(op.run).parameters)[1:]]
    assert set(fused_record.REGISTRY) == {name for name in iris.ops.__all__ if name in dir(ops)}


def test_the_fused_docs_table_is_the_records():
    assert fused_record.table() in (DOCS / "api" / "ops.md").read_text(), \
        "docs/api/ops.md's table of fused ops: paste python -m iris.ops"
