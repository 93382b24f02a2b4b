"""The house's layout, read from the code: imports only point down the layers, no module imports another in a
circle, upstream's module paths are the generated aliases of ``iris/upstream.py`` and nothing in the library
imports them, and no folder is more crowded than the layout allows. Nothing here runs a kernel."""

import ast
import pathlib

import pytest

from iris import upstream

ROOT = pathlib.Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "iris"

# Bottom first: a module may import modules of its own layer and of the layers below, never above.
LAYERS = [
    ("iris.errors", "iris.logging", "iris.platform", "iris.spellings"),
    ("iris.device",),
    ("iris.interpreter",),
    ("iris.host",),
    ("iris.ccl",),
    ("iris.ops", "iris.x"),
    ("iris.iris",),
    ("iris.distributed", "iris.compile", "iris.models", "iris.bench"),
]
# At the edge, above every layer: the package's face and upstream's paths (the table and its aliases).
EDGE = {"iris", "iris.upstream", *upstream.PATHS}
MAX_FILES_DIRECTLY_IN = {"iris/host": 12}


def module_name(path):
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules(root=PACKAGE):
    return {module_name(p): p for p in sorted(root.rglob("*.py"))}


def imports(name, path, known):
    """``(imported module, line, inside a function)`` for each import of an iris module in ``path``."""
    tree = ast.parse(path.read_text())
    top_level = {id(node) for node in tree.body}
    is_package = path.name == "__init__.py"
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name.split(".") if is_package else name.split(".")[:-1]
                base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target.startswith("iris") and target != name:
                found.append((target, node.lineno, id(node) not in top_level))
    return found


def layer_of(name):
    if name in EDGE:
        return len(LAYERS)
    best = None
    for level, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if name == prefix or name.startswith(prefix + "."):
                if best is None or len(prefix) > best[1]:
                    best = (level, len(prefix))
    assert best is not None, f"{name} belongs to no layer of tests/test_layers.py: LAYERS; give it one"
    return best[0]


def violations(root=PACKAGE):
    """Every import that points up a layer or reaches an upstream alias from the library, as readable lines."""
    known = modules(root)
    bad = []
    for name, path in known.items():
        if name in EDGE:
            continue
        for target, line, local in imports(name, path, known):
            where = f"{path.relative_to(root.parent)}:{line}"
            kind = "a function-local import" if local else "an import"
            if target == "iris":
                bad.append(f"{where}: {name} imports the package's face (iris/__init__.py); import the module that "
                           "defines the name")
            elif target in EDGE:
                bad.append(f"{where}: {name} imports {target}, an upstream alias (iris/upstream.py); import the "
                           "module it names instead")
            elif layer_of(target) > layer_of(name):
                bad.append(f"{where}: {kind} points up, {name} (layer {layer_of(name)}) -> {target} (layer "
                           f"{layer_of(target)}); move the code down or pass the object in")
    return bad


def cycles(root=PACKAGE):
    """Circles among the library's modules (top-level imports and function-local ones alike)."""
    known = modules(root)
    graph = {name: {t for t, _, _ in imports(name, path, known) if t not in EDGE} for name, path in known.items()
             if name not in EDGE}
    # a package's __init__ is imported by each of its modules' imports; its own re-exports are not a circle
    found, state = [], {}

    def visit(node, stack):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt.startswith(node + ".") or node.startswith(nxt + "."):
                continue
            if state.get(nxt) == "open":
                found.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
    return found


def test_imports_point_down():
    bad = violations()
    assert not bad, "imports against the layers:\n" + "\n".join(bad)


def test_no_circles():
    found = cycles()
    assert not found, "modules that import each other in a circle:\n" + "\n".join(" -> ".join(c) for c in found)


def test_a_planted_upward_import_is_named(tmp_path):
    """The checks fail, naming the line, on an upward import (here device -> host), on a library import of an
    upstream alias, and on a circle."""
    root = tmp_path / "iris"
    for name in ("device", "host"):
        (root / name).mkdir(parents=True)
        (root / name / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "host" / "heap.py").write_text("X = 1\n")
    (root / "hip.py").write_text("X = 1\n")
    (root / "device" / "rma.py").write_text("def f():\n    from iris.host.heap import X\n    return X\n")
    (root / "device" / "sync.py").write_text("import iris.hip\n")
    (root / "host" / "a.py").write_text("from iris.host import b\n")
    (root / "host" / "b.py").write_text("def f():\n    from iris.host.a import X\n")
    global ROOT
    saved, ROOT = ROOT, tmp_path
    try:
        bad, circles = violations(root), cycles(root)
    finally:
        ROOT = saved
    assert circles == [["iris.host.a", "iris.host.b", "iris.host.a"]], circles
    assert any("iris/device/rma.py:2: a function-local import points up, iris.device.rma (layer 1) -> "
               "iris.host.heap (layer 3)" in line for line in bad), bad
    assert any("iris/device/sync.py:1: iris.device.sync imports iris.hip, an upstream alias" in line
               for line in bad), bad


@pytest.mark.parametrize("path", sorted(upstream.PATHS))
def test_upstream_alias_is_generated_from_the_table(path):
    file = ROOT / upstream.file_of(path)
    assert file.read_text() == upstream.source(path), (f"{file.relative_to(ROOT)} differs from what iris/upstream.py "
                                                       "generates; edit the table and run python -m iris.upstream")


def test_upstream_aliases_are_our_objects():
    import importlib

    for path, (_, names) in upstream.PATHS.items():
        module = importlib.import_module(path)
        for name, target in names.items():
            source, _, attribute = target.partition(":")
            expected = importlib.import_module(source)
            if attribute:
                expected = getattr(expected, attribute)
            assert getattr(module, name) is expected, f"{path}.{name} is not {target}"


def test_design_shows_the_layers():
    lines = ["edge     iris (the face: iris/__init__.py), iris.upstream and upstream's paths"]
    lines += [f"layer {level}  " + "  ".join(names) for level, names in reversed(list(enumerate(LAYERS)))]
    picture = "```\n" + "\n".join(lines) + "\n```"
    assert picture in (ROOT / "docs" / "design.md").read_text(), f"docs/design.md, Layers, should show:\n{picture}"


def test_folders_stay_small_and_unambiguous():
    for folder, limit in MAX_FILES_DIRECTLY_IN.items():
        files = sorted(p.name for p in (ROOT / folder).glob("*.py"))
        assert len(files) <= limit, f"{folder} holds {len(files)} files directly ({files}); at most {limit}"
    for folder in [PACKAGE, *[p for p in PACKAGE.rglob("*") if p.is_dir() and p.name != "__pycache__"]]:
        stems = {p.stem for p in folder.glob("*.py")} | {p.name for p in folder.iterdir() if p.is_dir()}
        twins = sorted(s for s in stems if s + "s" in stems)
        assert not twins, f"{folder.relative_to(ROOT)}: {[(s, s + 's') for s in twins]} differ by a trailing 's'"


def _dotted_names_in_docs():
    """Every ``iris.a.b`` the README and ``docs/`` name, with its file, except on lines that say it is not here."""
    import re

    for file in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for line in file.read_text().splitlines():
            if "not here" in line.lower():
                continue
            for match in re.finditer(r"(?<![\w./-])iris(?:\.[A-Za-z_]\w*)+", line):
                yield match.group(0), file.relative_to(ROOT)


def test_every_path_the_docs_and_upstream_name_resolves():
    """A module path a reader meets (README, docs/, upstream's table) imports, and a name under it exists:
    ``import iris.ccl.moe_utils`` once raised ModuleNotFoundError after its module moved."""
    import importlib

    def resolve(name):
        parts = name.split(".")
        for i in range(len(parts), 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:i]))
                break
            except ModuleNotFoundError:
                continue
        for part in parts[i:]:
            obj = getattr(obj, part)
        return obj

    named = set(_dotted_names_in_docs()) | {(path, "iris/upstream.py") for path in upstream.PATHS}
    missing = []
    for name, where in sorted(named, key=str):
        try:
            resolve(name)
        except (ImportError, AttributeError) as e:
            missing.append(f"{where}: {name} ({type(e).__name__}: {e})")
    assert not missing, "\n".join(missing)
    assert importlib.import_module("iris.ccl.moe_utils").make_expt_assignment is not None


def test_no_module_sets_an_attribute_on_the_context_or_the_ops_at_import():
    """What you read is what runs: ``Iris`` and ``Ops`` hold what their class bodies define, decorators included;
    importing the package and upstream's paths adds or replaces nothing on them."""
    import subprocess
    import sys

    program = """
import importlib, sys
from iris.iris import Iris
from iris.ops import Ops
before = {c.__name__: dict(vars(c)) for c in (Iris, Ops)}
import iris, iris.upstream
for path in iris.upstream.PATHS:
    importlib.import_module(path)
changed = [f"{c.__name__}.{k}" for c in (Iris, Ops) for k in set(vars(c)) | set(before[c.__name__])
           if vars(c).get(k) is not before[c.__name__].get(k)]
print("CHANGED", sorted(changed))
"""
    # the iris package's face runs first on any import of iris.iris; what it does is checked by reading the code
    proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "CHANGED []" in proc.stdout, f"importing iris changed the classes: {proc.stdout.strip()}"
    setters = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "setattr" and node.args and \
                    isinstance(node.args[0], ast.Name) and node.args[0].id in ("Iris", "Ops"):
                setters.append(f"{path.relative_to(ROOT)}:{node.lineno}")
            targets = node.targets if isinstance(node, ast.Assign) else []
            for target in targets:
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) and \
                        target.value.id in ("Iris", "Ops"):
                    setters.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not setters, (f"{setters} set an attribute on Iris or Ops from outside their class; declare it in the "
                         f"class body (a decorator at the def: iris/spellings.py)")
