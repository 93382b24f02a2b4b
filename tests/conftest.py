"""Test tiers: one body, two tiers.

Each test module gets one pool of rank processes per world size (``pools(2)``), alive for the module, so
process start-up (interpreter import, process group) is paid once. The backend is the automatic one:
the cpu backend in CI, GPUs on the device machine (``IRIS_BACKEND`` overrides). ``IRIS_TEST_SCALE`` makes
sizes larger on GPUs ("gpu": real sizes); tests read it through ``scale()``.
"""

import os
import tempfile

import pytest

import iris

LAST = "test_compile.py::test_launched_kernels_compile_for_sm90"


def pytest_configure(config):
    """On the cpu backend, rank processes record every kernel specialisation they interpret
    (``iris/interpreter/launch_log.py``); ``LAST`` compiles them all for sm_90 after every other test."""
    if not on_gpu() and "IRIS_LAUNCH_LOG" not in os.environ:
        os.environ["IRIS_LAUNCH_LOG"] = tempfile.mkdtemp(prefix="iris-launches-")


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: item.nodeid.endswith(LAST))  # stable: everything else keeps its order


def on_gpu():
    return iris.platform.backend.BACKEND != "cpu"


@pytest.fixture(scope="module")
def pools():
    """``pools(world_size)`` gives this module's pool of that many ranks."""
    opened = {}

    def get(world_size):
        if world_size not in opened:
            opened[world_size] = iris.RankPool(world_size)
        return opened[world_size]

    yield get
    for pool in opened.values():
        pool.close()


def world_sizes():
    """2 and 4 ranks on the cpu backend; on GPUs as many as there are (at least 2 via simulation)."""
    env = os.environ.get("IRIS_TEST_WORLD_SIZES")
    if env:
        return [int(w) for w in env.split(",")]
    return [2, 4]
