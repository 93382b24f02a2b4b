"""Compile for sm_90, without a GPU, every kernel specialisation the CPU tier launched (used by test_compile.py).

Reads the records ``iris/interpreter/launch_log.py`` wrote into the directory given as the first argument, keeps the
kernels defined in the folders given after it, compiles each distinct specialisation with Triton's own LLVM and
ptxas, and prints ``RESULT`` and a JSON summary: how many compiled, and each failure with its first error line.
"""

import glob
import importlib.util
import json
import multiprocessing
import os
import pickle
import sys
import time

import iris  # noqa: F401  (the cuda backend: no interpreter)
import sm90
import triton
from triton.backends.compiler import GPUTarget


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


def _compile(record):
    """None, or what went wrong compiling one record."""
    filename, qualname, signature, constexprs, attrs, options = record
    where = f"{os.path.relpath(filename)}::{qualname}"
    if signature is None:  # the log could not describe the launch
        return f"{where}: not recorded: {constexprs}"
    try:
        if "<locals>" in qualname:
            raise RuntimeError("a kernel defined inside a function cannot be imported; define it at module level")
        source = sm90.source(_kernel(filename, qualname), signature, constexprs, attrs)
        triton.compile(source, target=GPUTarget("cuda", 90, 32), options=options)
    except Exception as e:
        messages = []
        while e is not None and len(messages) < 4:
            lines = str(e).strip().splitlines() or [""]
            errors = [line for line in lines if "error" in line.lower() and "Repro" not in line]
            messages.append(f"{type(e).__name__}: {(errors or lines)[0].strip()}")
            e = e.__cause__ or e.__context__
        values = {list(signature)[k[0]]: v for k, v in constexprs.items()}
        return f"{where} {signature} {values}: " + " <- ".join(messages)
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
    print("RESULT" + json.dumps({"compiled": len(outcomes) - len(failures), "failures": failures,
                                 "seconds": round(time.time() - start, 1)}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
