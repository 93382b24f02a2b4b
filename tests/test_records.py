"""Every collective's record against the code (``iris/ccl/record.py``): its reference and its form across nodes exist,
the torch bindings it names exist, every collective method of the ``"iris"`` process group and every collective op
of ``torch.ops.iris`` is claimed by a record, ``ctx.ccl`` has every name, and ``docs/design.md``'s table is the
records'. Nothing here runs a kernel."""

import inspect
import pathlib

import pytest
import torch

import iris.ccl
import iris.compile  # noqa: F401  (registers torch.ops.iris)
from iris.ccl import record, reference
from iris.ccl.multinode import hierarchical
from iris.distributed.process_group import IrisProcessGroup

DESIGN = pathlib.Path(__file__).resolve().parent.parent / "docs" / "design.md"
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


def test_ctx_ccl_binds_every_name():
    class Context:
        num_nodes = 1

    ccl = iris.ccl.CCL(Context())
    for name, collective in record.REGISTRY.items():
        method = getattr(ccl, name)
        assert method.__name__ == name and method.__doc__ == collective.run.__doc__


def test_the_docs_table_is_the_records():
    assert record.table() in DESIGN.read_text(), "docs/design.md's table of collectives: paste python -m iris.ccl"
