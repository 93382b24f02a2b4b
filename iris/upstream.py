"""Upstream Iris at the edge: its module paths, in one table (each path a program written for upstream imports, and
the object of ours that each of its names is), and the table of its spellings of our arguments (``KEYWORDS``,
``OPS_POSITIONAL``), which the methods they apply to declare (``iris/spellings.py``).

The alias modules (``iris/hip.py``, ``iris/mem/...``, ...) are generated from ``PATHS`` and hold nothing else;
``tests/test_layers.py`` checks every file against it, and no library module imports them (only the package's face,
``iris/__init__.py``, re-exports a few). They are files rather than an import hook so that IDEs and type checkers
resolve ``from iris.mem.triton.context import Context``. After editing the table, write the files again:

    python -m iris.upstream

A target is ``"module:attribute"``, or ``"module"`` for a module itself. A name in ``LAZY`` is imported on first
use (module ``__getattr__``), for targets that import Triton's Gluon or the tile API.
"""

import pathlib
import textwrap

# Upstream's spellings of our arguments, declared at the methods they apply to (``@accepts`` at ``Iris.put``,
# ``ops_arguments`` at the fused ops' binding) and recorded by those decorators: the table, read here.
from iris.spellings import KEYWORDS, OPS_IGNORED, OPS_POSITIONAL  # noqa: F401

_RMA = ("load", "store", "copy", "get", "put")
_ATOMICS = ("atomic_add", "atomic_sub", "atomic_cas", "atomic_xchg", "atomic_xor", "atomic_and", "atomic_or",
            "atomic_min", "atomic_max")
_DEVICE_QUERIES = ("count_devices", "set_device", "get_cu_count", "get_num_xcc", "get_wall_clock_rate", "get_arch")
_CREATION = ("parse_size", "is_valid_device", "throw_if_invalid_device", "apply_layout",
             "throw_if_invalid_output_tensor", "create", "empty", "zeros", "ones", "full", "zeros_like")
_TILE = ("Tile", "TileView", "TensorView", "AllReduceConfig", "make_tensor_view", "tile_layout", "tile_ptr")


def _each(module, names):
    return {name: f"{module}:{name}" for name in names}


# upstream path -> (what it is, one line; {name: target})
PATHS = {
    "iris.hip": ("the device queries upstream's examples call, answered for this platform",
                 _each("iris.platform.device_info", _DEVICE_QUERIES)),
    "iris.tensor_creation": ("tensor creation as functions of a heap and its device",
                             _each("iris.host.memory.creation", _CREATION)),
    "iris.gluon": ("the Gluon device API's entry point",
                   {"IrisDeviceCtx": "iris.device.gluon:IrisDeviceCtx"}),
    "iris.context": ("the device contexts of one of upstream's layouts",
                     {"TritonContext": "iris.device.context:DeviceContext",
                      "GluonContext": "iris.device.gluon:IrisDeviceCtx"}),
    "iris.copy_engine": ("the copy engine from one import: the Tile that ctx.put_tile takes, host address translation "
                         "for its to_ptr, and the device operations",
                         {"Tile": "iris.host.copy_engine.api:Tile",
                          "ENGINE_NAMES": "iris.host.copy_engine.api:ENGINE_NAMES",
                          "peer_address": "iris.host.memory.peers:peer_address",
                          **_each("iris.device.copy_engine", ("put_async", "quiet", "put_signal", "put_signal_rect",
                                                              "wait_then_put_rect", "wait_then_put_signal_rect"))}),
    "iris.triggered": ("copy-engine transfers that kernels release",
                       {**_each("iris.host.copy_engine.triggered",
                                ("TriggeredPlan", "State", "Batch", "Segment", "whole", "chunks")),
                        **_each("iris.device.triggered", ("publish", "arrived", "wait"))}),
    "iris.experimental": ("the Gluon device API under its oldest path",
                          {"iris_gluon": "iris.experimental.iris_gluon"}),
    "iris.experimental.iris_gluon": ("the Gluon device context",
                                     {"IrisDeviceCtx": "iris.device.gluon:IrisDeviceCtx"}),
    "iris.mem": ("upstream's newest layout of the device API",
                 {"triton": "iris.mem.triton", "utils": "iris.mem.utils"}),
    "iris.mem.gluon": ("the Gluon device context", {"Context": "iris.device.gluon:IrisDeviceCtx",
                                                    "IrisDeviceCtx": "iris.device.gluon:IrisDeviceCtx"}),
    "iris.mem.gluon.context": ("the Gluon device context", {"Context": "iris.device.gluon.context:IrisDeviceCtx"}),
    "iris.mem.triton": ("the Triton device API; its tile types are the tile API's (iris.x)",
                        {"Context": "iris.device.context:DeviceContext",
                         "DeviceContext": "iris.device.context:DeviceContext",
                         **_each("iris.device.rma", _RMA), **_each("iris.device.atomics", _ATOMICS),
                         **_each("iris.x", _TILE)}),
    "iris.mem.triton.context": ("the Triton device context", {"Context": "iris.device.context:DeviceContext"}),
    "iris.mem.triton.ops": ("the device RMA and atomics",
                            {**_each("iris.device.rma", _RMA), **_each("iris.device.atomics", _ATOMICS)}),
    "iris.mem.utils": ("device timers and topology a kernel can read",
                       _each("iris.device.utils", ("read_realtime", "get_cu_id", "get_xcc_id"))),
    "iris.device_utils": ("device timers and topology a kernel can read (its older flat path)",
                          _each("iris.device.utils", ("read_realtime", "get_wall_clock", "get_cu_id", "get_xcc_id",
                                                      "get_se_id"))),
    "iris.device.triton": ("the Triton device context's package", {"context": "iris.device.triton.context"}),
    "iris.device.triton.context": ("the Triton device context",
                                   {"DeviceContext": "iris.device.context:DeviceContext"}),
    "iris.device.sdma_utils": ("the copy-engine endpoint a context with engines=('sdma',) drives: our copy engine's "
                               "host API, always present (upstream's is None without its AMD package; AMD's SDMA "
                               "packet emitters have no NVIDIA equivalent)",
                               {"sdma_ep": "iris.host.copy_engine.api"}),
    "iris.host.logging": ("the rank-aware logger",
                          _each("iris.logging", ("logger", "set_logger_level", "IrisFormatter", "RankFormatter",
                                                 "RankLogger", "DEBUG", "INFO", "WARNING", "ERROR"))),
    "iris.host.logging.logging": ("the log formatter", _each("iris.logging", ("IrisFormatter", "RankFormatter",
                                                                              "logger"))),
    "iris.host.tracing.events": ("the trace event table", {"TraceEvent": "iris.device.trace_events:TraceEvent"}),
    "iris.ccl.moe_utils": ("the MoE expert assignment and routing metadata",
                           _each("iris.ccl.moe.routing", ("ExptAssignment", "RaggedTensorMetadata",
                                                          "make_expt_dict_uniform", "make_expt_assignment",
                                                          "make_ragged_tensor_metadata", "topk"))),
}

LAZY = {("iris.context", "GluonContext"), *(("iris.mem.triton", name) for name in _TILE)}

ROOT = pathlib.Path(__file__).resolve().parent.parent


def is_package(path):
    return any(other.startswith(path + ".") for other in PATHS)


def file_of(path):
    """The file of alias module ``path``, relative to the repository root."""
    parts = path.split(".")
    return pathlib.Path(*parts, "__init__.py") if is_package(path) else pathlib.Path(*parts[:-1], parts[-1] + ".py")


def source(path):
    """The text of alias module ``path``, as generated from ``PATHS``."""
    what, names = PATHS[path]
    doc = f'"""``{path}``, upstream Iris\'s module path: {what}. Generated from ``iris/upstream.py``."""'
    lines = [textwrap.fill(doc, 120, break_on_hyphens=False), ""]
    eager, lazy = {}, {}
    for name, target in names.items():
        module, _, attribute = target.partition(":")
        if (path, name) in LAZY:
            lazy[name] = (module, attribute)
            continue
        if not attribute:
            module, _, attribute = module.rpartition(".")
        eager.setdefault(module, []).append(attribute if attribute == name else f"{attribute} as {name}")
    if lazy:
        lines += ["import importlib", ""]
    lines += [f"from {module} import {', '.join(items)}" for module, items in sorted(eager.items())]
    if lazy:
        lines += ["", "_LAZY = {"] + [f'    "{name}": ("{module}", "{attribute}"),'
                                      for name, (module, attribute) in lazy.items()]
        lines += ["}", "", "", "def __getattr__(name):",
                  "    if name in _LAZY:",
                  "        module, attribute = _LAZY[name]",
                  "        return getattr(importlib.import_module(module), attribute)",
                  f'    raise AttributeError(f"module {path!r} has no attribute {{name!r}}")', ""]
    lines += ["", "__all__ = [" + ", ".join(f'"{name}"' for name in names) + "]", ""]
    return "\n".join(_wrap(line) if line.startswith(("from ", "__all__")) else line for line in lines)


def _wrap(line, width=120):
    """An import or ``__all__`` line past ``width`` broken inside parentheses / brackets."""
    if len(line) <= width:
        return line
    if line.startswith("from "):
        head, _, names = line.partition(" import ")
        head, items = f"{head} import (", names.split(", ")
        closing = ")"
    else:
        head, _, rest = line.partition("[")
        head, items, closing = head + "[", rest[:-1].split(", "), "]"
    out, current = [], head
    for i, item in enumerate(items):
        piece = item + ("," if i < len(items) - 1 else closing)
        if len(current) + len(piece) + 1 > width:
            out.append(current.rstrip())
            current = " " * len(head) + piece
        else:
            current += ("" if current.endswith(("(", "[")) else " ") + piece
    out.append(current)
    return "\n".join(out)


def write():
    """Write every alias module from the table."""
    for path in PATHS:
        target = ROOT / file_of(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(source(path))


if __name__ == "__main__":
    write()
