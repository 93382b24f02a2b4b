"""Every public host function and method (the walk of ``tests/test_hints.py``) and every device function of
``iris.__all__`` and ``iris.x.__all__`` shows a short example in its docstring, an ``Example::`` block, and the
examples run: all of them, in order, at 2 ranks on the cpu backend (a device function's example defines a
``@triton.jit`` kernel that calls it, launches it and checks what it did).

An example runs with these names defined: ``ctx`` (a context of 2 ranks with a 16 MiB heap), ``rank``,
``world_size``, ``torch``, ``dist`` (``torch.distributed``), ``iris``, ``triton`` and ``tl``. Every rank runs
every example, so a collective in one is met. An example that cannot run there (it starts ranks of its own, makes
another context, needs a GPU) begins with a comment saying why: ``# not run by the tests: <why>``; it must still be
Python."""

import ast
import importlib
import inspect
import linecache
import re
import textwrap

import pytest

from test_hints import _is_device_function, public_host_api

EXAMPLE = re.compile(r"^(?P<indent>[ \t]*)Example::[ \t]*\n(?P<body>(?:[ \t]*\n)*(?:(?P=indent)[ \t]+\S.*\n?|[ \t]*\n)+)",
                     re.M)
NOT_RUN = "# not run by the tests:"
# Constructors show their example in the class's docstring; these have no example of their own to give.
NO_EXAMPLE = re.compile(r"\.__init__$")


def public_device_api():
    """``{label: function}`` of the device functions users call: those of ``iris.__all__`` and ``iris.x.__all__``
    (the Python function under Triton's wrapper)."""
    found = {}
    for module_name in ("iris", "iris.x"):
        module = importlib.import_module(module_name)
        for name in module.__all__:
            obj = getattr(module, name)
            if _is_device_function(obj):
                found[f"{module_name}.{name}"] = obj.fn
    return found


def public_api():
    return {**public_host_api()[0], **public_device_api()}


def example_of(fn):
    """The code of ``fn``'s ``Example::`` block, dedented, or None."""
    doc = inspect.getdoc(fn) or ""
    found = EXAMPLE.search(doc + "\n")
    return textwrap.dedent(found.group("body")).strip("\n") + "\n" if found else None


def examples():
    """``[(labels, code)]``: each docstring's example once (``ctx.ccl.all_reduce`` shares ``iris.ccl.all_reduce``'s),
    in the walk's order, with every label that shows it."""
    found = public_api()
    by_code = {}
    for label, fn in sorted(found.items()):
        code = example_of(fn)
        if code is not None:
            by_code.setdefault(code, []).append(label)
    return [(labels, code) for code, labels in by_code.items()]


def test_every_public_callable_has_an_example():
    found = public_api()
    missing = [label for label, fn in sorted(found.items()) if not NO_EXAMPLE.search(label) and example_of(fn) is None]
    assert missing == [], (f"{len(missing)} public callables without an 'Example::' block in their docstring:\n"
                           + "\n".join(missing))


def test_the_examples_are_python():
    broken = []
    for labels, code in examples():
        try:
            ast.parse(code)
        except SyntaxError as e:
            broken.append(f"{labels[0]}: line {e.lineno}: {e.msg}")
    assert broken == [], "\n".join(broken)


def _run_examples(runnable):
    import torch
    import torch.distributed as dist
    import triton
    import triton.language as tl

    import iris

    ctx = iris.iris(1 << 24, timeout_s=60)
    rank, world_size = ctx.get_rank(), ctx.get_num_ranks()
    for labels, code in runnable:
        names = {"ctx": ctx, "rank": rank, "world_size": world_size, "torch": torch, "dist": dist, "iris": iris,
                 "triton": triton, "tl": tl}
        # registered as a file, so that triton.jit finds the source of a kernel the example defines
        filename = f"<example of {labels[0]}>"
        linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
        try:
            exec(compile(code, filename, "exec"), names)
            ctx.barrier()
        except Exception as e:
            return f"the example of {', '.join(labels)} raised {type(e).__name__}: {e}\n{code}"
    return None


def test_the_examples_run(pools):
    runnable = [(labels, code) for labels, code in examples() if not code.startswith(NOT_RUN)]
    assert runnable, "no example to run"
    for rank, failure in enumerate(pools(2).run(_run_examples, runnable, timeout_s=900)):
        assert failure is None, f"rank {rank}: {failure}"


@pytest.mark.parametrize("doc, code", [
    ("Sum.\n\nExample::\n\n    x = 1\n    y = x + 1\n\nMore prose.\n", "x = 1\ny = x + 1\n"),
    ("Sum.\n\n    Example::\n\n        x = 1\n\n        y = 2\n", "x = 1\n\ny = 2\n"),
    ("No example here.\n", None),
])
def test_an_example_is_found(doc, code):
    def fn():
        pass

    fn.__doc__ = doc
    assert example_of(fn) == code
