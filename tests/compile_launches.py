"""Compile for sm_90, without a GPU, every kernel specialisation the CPU tier launched (used by test_compile.py).

Reads the records ``iris/interpreter/launch_log.py`` wrote into the directory given as the first argument, keeps
the kernels defined in the folders given after it, compiles each distinct specialisation with Triton's own LLVM and
ptxas, and prints ``RESULT`` and a JSON summary: how many compiled, the kernels compiled, and each failure in one
line: the source line of each call down to where compiling stopped, then the compiler's first diagnostic.
"""

import contextlib
import glob
import importlib.util
import json
import multiprocessing
import os
import pickle
import sys
import tempfile
import time
import traceback

import iris  # noqa: F401  (the cuda backend: no interpreter)
import sm90
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler.errors import CompilationError


def _records(directory):
    for path in sorted(glob.glob(os.path.join(directory, "launches-*.pkl"))):
        with open(path, "rb") as f:
            while True:
                try:
                    yield pickle.load(f)
                except EOFError:
                    break


_modules = {}


def _kernel(filename, qualname):
    if filename not in _modules:
        folder = os.path.dirname(filename)
        if folder not in sys.path:
            sys.path.insert(0, folder)  # test modules import conftest and rank_utils beside them
        name = "_launched_" + os.path.splitext(os.path.basename(filename))[0]
        spec = importlib.util.spec_from_file_location(name, filename)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        _modules[filename] = module
    fn = _modules[filename]
    for part in qualname.split("."):
        fn = getattr(fn, part)
    return fn


@contextlib.contextmanager
def _stderr_to(file):
    """File descriptor 2 into ``file``: the MLIR verifier and ptxas write their diagnostics there, not into the
    exception (a failed verification raises a bare ``AssertionError``)."""
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(file.fileno(), 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)


def _explain(e, diagnostics):
    """One line for a failed compile: the source line of each call, outermost first, down to the Python error, then
    the compiler's first diagnostic where the error does not already say it."""
    chain = []
    while e is not None and len(chain) < 8:
        lines = str(e).strip().splitlines() or [""]
        if isinstance(e, CompilationError) and "^" in [line.strip() for line in lines]:
            # "at L:C:", the function's source up to line L, a caret under column C, then the message unless a
            # chained exception carries it
            caret = [line.strip() for line in lines].index("^")
            message = " ".join(line.strip() for line in lines[caret + 1:])
            inner = e.__cause__ or e.__context__
            chain.append(lines[caret - 1].strip() + (f": {message}" if message and inner is None else ""))
        elif lines[0]:
            errors = [line for line in lines if "error" in line.lower() and "Repro" not in line]
            chain.append(f"{type(e).__name__}: {(errors or lines)[0].strip()}")
        else:
            frame = traceback.extract_tb(e.__traceback__)[-1]
            where = frame.filename.split("site-packages" + os.sep)[-1]
            chain.append(f"{type(e).__name__} at {where}:{frame.lineno}: {frame.line}")
        e = e.__cause__ or e.__context__
    diagnostics.seek(0)
    first = next((line.strip() for line in diagnostics if "error" in line.lower()), None)
    if first and all(first not in c for c in chain):
        chain.append(first)
    return " <- ".join(chain)


def _compile(record):
    """None, or what went wrong compiling one record."""
    filename, qualname, signature, constexprs, attrs, options = record
    where = f"{os.path.relpath(filename)}::{qualname}"
    if signature is None:  # the log could not describe the launch
        return f"{where}: not recorded: {constexprs}"
    with tempfile.TemporaryFile("w+") as diagnostics:
        try:
            if "<locals>" in qualname:
                raise RuntimeError("a kernel defined inside a function cannot be imported; define it at module level")
            source = sm90.source(_kernel(filename, qualname), signature, constexprs, attrs)
            with _stderr_to(diagnostics):
                triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options)
        except Exception as e:
            values = {list(signature)[k[0]]: v for k, v in constexprs.items()}
            return f"{where} {signature} {values}: {_explain(e, diagnostics)}"
    return None


def main(directory, roots):
    roots = [os.path.abspath(r) + os.sep for r in roots]
    records = {}
    for record in _records(directory):
        if any(os.path.abspath(record[0]).startswith(r) for r in roots):
            records.setdefault(repr(record), record)
    start = time.time()
    # One process per core: each compile is single-threaded (ptxas included).
    with multiprocessing.get_context("spawn").Pool(max(1, min(os.cpu_count() or 1, 8))) as pool:
        outcomes = pool.map(_compile, list(records.values()), chunksize=4)
    failures = [o for o in outcomes if o is not None]
    kernels = sorted({f"{os.path.relpath(r[0])}::{r[1]}" for r, o in zip(records.values(), outcomes) if o is None})
    print("RESULT" + json.dumps({"compiled": len(outcomes) - len(failures), "kernels": kernels, "failures": failures,
                                 "seconds": round(time.time() - start, 1)}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
