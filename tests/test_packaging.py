"""What a user gets from installing and importing iris: the logging and layering a library owes its
application, and the checks around the private torch / Triton APIs (``iris/platform/private.py``)."""

import os
import subprocess
import sys

import pytest
import torch

import iris  # noqa: F401  (before triton)
from iris.platform import private


def test_import_shows_warnings_and_leaves_the_bench_harness_alone():
    """``import iris`` adds one rank-prefixed handler at level WARNING (errors are never silent), keeps propagation
    on and does not load iris.bench; ``set_logger_level`` keeps the one handler; an application's own root
    handlers take the records instead (nothing prints twice); ``IRIS_LOG_LEVEL`` sets the level."""
    code = ("import logging, sys, iris; log = logging.getLogger('iris'); "
            "print(log.propagate, sorted(type(h).__name__ for h in log.handlers), log.level, 'iris.bench' in sys.modules); "
            "iris.set_logger_level(iris.INFO); iris.set_logger_level(iris.DEBUG); "
            "print(sorted(type(h).__name__ for h in log.handlers), iris.do_bench.__module__); "
            "iris.logger.error('shown once'); iris.logger.debug('debug shown'); "
            "logging.basicConfig(format='app: %(message)s'); iris.logger.error('through the app')")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    lines = run.stdout.split("\n")
    assert lines[0] == "True ['StreamHandler'] 30 False"
    assert lines[1] == "['StreamHandler'] iris.host.timing"
    shown = [line[9:] for line in run.stderr.splitlines()[:2]] + run.stderr.splitlines()[2:]  # past "HH:MM:SS "
    assert shown == ["ERROR [Iris] [?/?] shown once", "DEBUG [Iris] [?/?] debug shown", "app: through the app"], (
        run.stderr)
    env_code = "import iris; print(iris.logger.level); iris.logger.info('info shown')"
    env = {**os.environ, "IRIS_LOG_LEVEL": "info"}
    run = subprocess.run([sys.executable, "-c", env_code], capture_output=True, text=True, check=True, env=env)
    shown = run.stderr.strip()[9:]
    assert run.stdout.strip() == "20" and shown == "INFO  [Iris] [?/?] info shown", (run.stdout, run.stderr)


def test_version_check_names_what_is_untested():
    assert private.check_versions("2.13.0+cpu", "3.6.0") == []
    assert private.check_versions("2.14.1", "3.8.0") == []
    found = private.check_versions("2.10.0", "3.9.1")
    assert found == ["torch 2.10.0 is outside the tested torch 2.11 to 2.14",
                     "triton 3.9.1 is outside the tested triton 3.6 to 3.8"]


def test_private_apis_are_reachable_here():
    """Each accessor finds its API in the installed versions (CI runs this at both ends of the tested range)."""
    assert private.triton_interpreter().GridExecutor is not None
    data = torch.arange(4, dtype=torch.int32)
    storage = private.construct_storage(data.data_ptr(), data.device, 16)
    assert storage is not None and storage.data_ptr() == data.data_ptr()


def test_missing_private_api_is_a_clear_error(monkeypatch):
    import torch.distributed as dist

    monkeypatch.delattr(dist.distributed_c10d, "_get_default_store")
    with pytest.raises(RuntimeError, match=r"_get_default_store, which torch .* does not have; iris is tested with "
                                           r"torch 2.11 to 2.14"):
        private.default_store()


def test_subpackages_load_on_first_use():
    """``import iris`` leaves the subpackages unloaded; ``iris.ccl``, ``iris.x`` and the rest are then attributes
    that import them (a kernel's ``iris.x.Tile`` with no ``import iris.x``), each a real module of that name; a
    name that is none of them is still an AttributeError."""
    code = ("import sys, iris; subs = iris._SUBPACKAGES; "
            "print(sorted(s for s in subs if f'iris.{s}' in sys.modules)); "
            "print(all(getattr(iris, s) is sys.modules[f'iris.{s}'] for s in subs), iris.x.Tile.__name__, "
            "set(subs) <= set(dir(iris)))\n"
            "try:\n    iris.no_such_thing\nexcept AttributeError as e:\n    print(e)")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.splitlines() == ["[]", "True Tile True", "module 'iris' has no attribute 'no_such_thing'"], (
        run.stdout, run.stderr[-2000:])


def test_upstream_module_path_and_factory():
    # upstream code does `from iris.iris import DeviceContext` and calls `iris.iris(heap_size)`: both must hold
    import iris
    from iris.iris import DeviceContext, Iris

    assert DeviceContext is iris.DeviceContext and Iris is iris.Iris
    assert callable(iris.iris) and iris.iris is sys.modules["iris.iris"].iris  # the package attribute: the factory
