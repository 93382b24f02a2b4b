"""Type hints on the public host API: every function and method a user calls (what ``iris.__all__`` and the public
modules below export, the context's methods and the rooms it hands out) annotates each parameter but
``self``/``cls``, ``*args`` and ``**kwargs``, and its return, and ``typing.get_type_hints`` resolves the annotations.

Device code is left out: Triton and Gluon kernels, the device API (``iris.load``, ``iris.atomic_add``, ...) and the
device aggregates (``iris.DeviceContext``, ``iris.x.Tile``, ...), since Triton gives a parameter's annotation a meaning
(``tl.constexpr``): their docstrings carry the types. Nothing here starts a rank or runs a kernel."""

import importlib
import inspect
import sys
import types
import typing

import torch

from iris.ccl import CCL
from iris.ccl.common import Work
from iris.host.tracing import Tracing
from iris.iris import Iris
from iris.ops import Ops

# The modules a user imports from: each name of their ``__all__`` is walked (a class: its public methods and its
# constructor; a module of this list: its own ``__all__``).
MODULES = ("iris", "iris.tensor_creation", "iris.hip", "iris.ccl", "iris.copy_engine", "iris.distributed",
           "iris.compile", "iris.x", "iris.ops")
# The classes a context hands out, which no ``__all__`` names: the context itself, its rooms (``ctx.ccl``,
# ``ctx.ops``, ``ctx.tracing``) and what ``async_op=True`` returns.
ROOMS = (Iris, CCL, Ops, Tracing, Work)
# Device aggregates: plain classes on the cpu backend (the interpreter loses an aggregate's jitted methods), Triton
# aggregates on GPUs; device code either way.
DEVICE = {"iris.DeviceContext", "iris.TraceEvent", "iris.x.DeviceContext", "iris.x.Tile", "iris.x.TileView",
          "iris.x.TensorView", "iris.x.AllReduceConfig"}
# torch.distributed's backend interface: torch calls these methods (``allreduce(tensors, opts)``, ``Work.wait``) and
# declares their types; a user reaches them through ``dist.all_reduce`` and the like.
TORCH_INTERFACE = {"iris.distributed.IrisProcessGroup", "iris.distributed.Work"}


def _is_device_function(obj):
    """A ``@triton.jit`` / ``@gluon.jit`` function (compiled or interpreted): Triton's wrapper around ``obj.fn``."""
    return inspect.isfunction(getattr(obj, "fn", None)) and not inspect.isfunction(obj)


def _label(fn, owner=None, name=None):
    """``module.qualname`` of ``fn``: where to add its hints. A method made by a function (``<locals>`` in its
    qualname, as ``ctx.ccl``'s are) is named by the class that holds it."""
    if owner is not None and "<locals>" in fn.__qualname__:
        return f"{owner.__module__}.{owner.__qualname__}.{name}"
    return f"{fn.__module__}.{fn.__qualname__}"


def _methods(cls):
    """``{label: function}`` for the public methods of ``cls`` and its constructor, those defined in iris."""
    found = {}
    for name, _ in inspect.getmembers(cls):
        if name.startswith("_") and name != "__init__":
            continue
        fn = inspect.getattr_static(cls, name)  # properties are read, not called: left out
        if isinstance(fn, (staticmethod, classmethod)):
            fn = fn.__func__
        if inspect.isfunction(fn) and (fn.__module__ or "").startswith("iris"):  # not torch's or object's
            found[_label(fn, cls, name)] = fn
    return found


def public_host_api():
    """``{label: function}`` of every host function and method in scope, and the names of anything callable the walk
    could not place (a new kind of export: give it a rule here)."""
    found, unplaced, seen = {}, [], set()

    def walk(module_name):
        module = importlib.import_module(module_name)
        for name in module.__all__:
            obj, dotted = getattr(module, name), f"{module_name}.{name}"
            if inspect.ismodule(obj):
                if obj.__name__ in MODULES and obj.__name__ not in seen:
                    seen.add(obj.__name__)
                    walk(obj.__name__)
            elif inspect.isclass(obj):
                if dotted not in DEVICE and dotted not in TORCH_INTERFACE and obj.__module__.startswith("iris"):
                    found.update(_methods(obj))
            elif inspect.isfunction(obj):
                found[_label(obj)] = obj
            elif _is_device_function(obj) or isinstance(obj, torch._ops.OpOverload):
                continue  # device code; torch.ops.iris.* are typed by their schema
            elif callable(obj) and not inspect.isbuiltin(obj):
                unplaced.append(dotted)

    for module_name in MODULES:
        if module_name not in seen:
            seen.add(module_name)
            walk(module_name)
    for room in ROOMS:
        found.update(_methods(room))
    return found, unplaced


def missing_hints(label, fn):
    """What ``fn`` lacks: ``label(param)`` for each parameter without an annotation, ``label(return)`` without a return
    annotation, and ``get_type_hints``'s error when an annotation names nothing."""
    problems = []
    signature = inspect.signature(fn, eval_str=False)  # what help() and the docs show (``@accepts`` aliases too)
    for i, parameter in enumerate(signature.parameters.values()):
        if i == 0 and parameter.name in ("self", "cls"):
            continue
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        if parameter.annotation is parameter.empty:
            problems.append(f"{label}({parameter.name})")
    if signature.return_annotation is signature.empty:
        problems.append(f"{label}(return)")
    try:
        typing.get_type_hints(fn)
    except Exception as e:  # a string annotation naming something its module does not hold
        problems.append(f"{label}: typing.get_type_hints raises {type(e).__name__}: {e}")
    return problems


def test_the_walk_finds_the_public_host_api():
    found, unplaced = public_host_api()
    assert unplaced == [], f"exports the walk cannot place (give them a rule in tests/test_hints.py): {unplaced}"
    expected = {"iris.iris.iris", "iris.iris.Iris.__init__", "iris.host.topology.TopologyMethods.get_rank",
                "iris.host.memory.factories.TensorFactory.zeros", "iris.host.topology.TopologyMethods.group_ranks",
                "iris.host.distributed.SyncMethods.barrier", "iris.logging.RankLogger.info",
                "iris.host.copy_engine.api.CopyEngineMethods.put", "iris.host.launcher.launch",
                "iris.ccl.all_reduce.all_reduce", "iris.ccl.CCL.all_reduce",
                "iris.ccl.moe.dispatch.MoEDispatcher.dispatch", "iris.ccl.config.Config.collective",
                "iris.ops.Ops.matmul_all_reduce", "iris.distributed.process_group.set_context",
                "iris.compile.functional.set_context", "iris.host.memory.creation.zeros",
                "iris.platform.device_info.get_arch", "iris.host.tracing.Tracing.export"}
    assert expected <= set(found), f"the walk missed {sorted(expected - set(found))}"
    assert not any("DeviceContext" in label or label.startswith("iris.x.") for label in found), (
        "device code in the walk: " + ", ".join(label for label in found if "iris.x." in label or "Device" in label))


def test_public_host_functions_have_type_hints():
    found, _ = public_host_api()
    problems = [p for label, fn in sorted(found.items()) for p in missing_hints(label, fn)]
    assert problems == [], (f"{len(problems)} public host parameters or returns without type hints (annotate them; "
                            "device code is out of scope):\n" + "\n".join(problems))


def test_a_planted_function_without_hints_is_named():
    """The checks name each parameter and return without an annotation, and an annotation that names nothing."""
    module = types.ModuleType("iris_planted")
    exec("class Room(Exception):\n"
         "    def method(self, a: int, b, *args, c=1, **kwargs) -> None: ...\n"
         "def function(x: 'NoSuchType') -> int: ...\n"
         "def bare(y): ...\n", module.__dict__)
    sys.modules[module.__name__] = module
    try:
        labelled = {**_methods(module.Room), "iris_planted.function": module.function,
                    "iris_planted.bare": module.bare}
        problems = [p for label, fn in sorted(labelled.items()) for p in missing_hints(label, fn)]
    finally:
        del sys.modules[module.__name__]
    assert set(labelled) == {"iris_planted.Room.method", "iris_planted.function", "iris_planted.bare"}, labelled
    assert "iris_planted.Room.method(b)" in problems and "iris_planted.Room.method(c)" in problems, problems
    assert not any("(a)" in p or "(args)" in p or "(kwargs)" in p or "(self)" in p for p in problems), problems
    assert "iris_planted.bare(y)" in problems and "iris_planted.bare(return)" in problems, problems
    unresolved = "iris_planted.function: typing.get_type_hints raises NameError"
    assert any(p.startswith(unresolved) for p in problems), problems
