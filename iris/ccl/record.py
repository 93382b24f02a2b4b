"""One record per collective: what it is, declared once in its kernel's module, and read by everything built on it.

A collective's module ends with ``declare(...)``, which files a ``Collective`` here. From the records come:
``ctx.ccl``'s methods (``iris/ccl/__init__.py``: each name and alias bound to the context, with the call across
nodes, ``hierarchical``: the function of that name in ``iris/ccl/multinode/hierarchical.py``), which calls may ask for
a Gluon kernel (``common.resolve_config``), and the table of collectives in ``docs/design.md`` ("Adding a
collective", printed by ``python -m iris.ccl``). The torch bindings are declared here too (the ``"iris"``
process group's methods and the ``torch.ops.iris`` op that run the collective), and ``tests/test_records.py``
checks each record against the code: the reference and the hierarchical form exist, every binding it names exists
and every method of the process group and every compile op is claimed by a record, and the docs' table is the
records'.
"""

import dataclasses
import inspect
import typing
from typing import Callable, Optional

REGISTRY = {}  # name and alias -> Collective, in declaration order


@dataclasses.dataclass(frozen=True)
class Collective:
    """What one collective is.

    ``name``: ``ctx.ccl.<name>``, and the function ``run(ctx, ...)`` that the method calls with the context.
    ``reference``: its torch form in ``iris/ccl/reference.py`` (float64 where values are floating point), which
    the tests compare with. ``summary``: one line for the docs' table. ``hierarchical``: the name of its form
    across nodes in ``iris/ccl/multinode/hierarchical.py``. ``aliases``: more names for the same call (torch's
    names for the layouts they share). ``gluon``: a Gluon kernel exists (``CollectiveConfig(use_gluon=True)``).
    ``process_group``: the methods of the ``"iris"`` torch.distributed backend that run it
    (``iris/distributed/process_group.py``). ``compile_op``: the ``torch.ops.iris`` op that runs it
    (``iris/compile/functional.py``), or None."""

    name: str
    run: Callable
    reference: Callable
    summary: str
    hierarchical: str
    aliases: tuple = ()
    gluon: bool = False
    process_group: tuple = ()
    compile_op: Optional[str] = None

    @property
    def names(self):
        return (self.name, *self.aliases)


def declare(name, run, reference, summary, hierarchical, **fields):
    """File the record of a collective (once per name: a second record of a name is a mistake, and raises)."""
    return file(REGISTRY, Collective(name, run, reference, summary, hierarchical, **fields))


def file(registry, record):
    """``record`` filed in ``registry`` under each of its names; a name already there raises (the fused ops'
    records, ``iris/ops/record.py``, are filed the same way)."""
    for each in record.names:
        if each in registry:
            raise ValueError(f"{record.run.__module__}: {each!r} is declared twice ({registry[each].run.__module__} "
                             f"and {record.run.__module__})")
    registry.update(dict.fromkeys(record.names, record))
    return record


def method_class(name, base, records, method):
    """The class ``name``, derived from ``base``, with a method for each name of each record, made by ``method(name,
    record)``: ``ctx.ccl``'s and ``ctx.ops``'s classes, made once from the records, so that ``dir()`` and ``help()``
    show every collective with its signature and docstring."""
    namespace = {each: method(each, record) for record in records for each in record.names}
    return type(name, (base,), {"__module__": base.__module__, "__qualname__": name, "__doc__": base.__doc__,
                                **namespace})


def as_method(function, name, run):
    """``function`` (which takes ``self`` for ``run``'s context) named ``name`` and showing ``run``'s docstring and
    signature, ``self`` in the context's place."""
    signature = inspect.signature(run)
    self = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    function.__name__, function.__doc__ = name, run.__doc__
    function.__signature__ = signature.replace(parameters=[self, *list(signature.parameters.values())[1:]])
    function.__annotations__ = {key: value for key, value in typing.get_type_hints(run).items() if key != "ctx"}
    return function


def records():
    """Every record once, in declaration order."""
    return list(dict.fromkeys(REGISTRY.values()))


def has_gluon(caller):
    """Whether ``ccl.<name>`` (a caller's name) has a Gluon kernel."""
    record = REGISTRY.get(caller.partition(".")[2])
    return record is not None and record.gluon


def table():
    """The docs' table of collectives, from the records (``docs/design.md``, "Adding a collective")."""
    rows = ["| `ctx.ccl.` | what it does | across nodes | Gluon | `\"iris\"` process group | `torch.ops.iris` |",
            "| --- | --- | --- | --- | --- | --- |"]
    for record in sorted(records(), key=lambda r: r.name):  # by name: the import order is not the reader's
        names = ", ".join(f"`{name}`" for name in record.names)
        methods = ", ".join(f"`{method}`" for method in record.process_group) or "-"
        rows.append(f"| {names} | {record.summary} | `{record.hierarchical}` | {'yes' if record.gluon else '-'} | "
                    f"{methods} | {f'`{record.compile_op}`' if record.compile_op else '-'} |")
    return "\n".join(rows)
