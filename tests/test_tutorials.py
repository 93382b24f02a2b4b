"""Every tutorial (``tutorials/NN_*.py``, the site's gallery) runs as a reader would run it, on the cpu backend, and
checks its own results (each asserts against torch; a failed check exits non-zero)."""

import os
import pathlib
import subprocess
import sys

import pytest

TUTORIALS = sorted((pathlib.Path(__file__).resolve().parent.parent / "tutorials").glob("[0-9][0-9]_*.py"))


def test_there_are_tutorials():
    assert len(TUTORIALS) >= 6, [t.name for t in TUTORIALS]


@pytest.mark.parametrize("path", TUTORIALS, ids=[t.stem for t in TUTORIALS])
def test_tutorial_runs(path):
    head = path.read_text().split('"""')
    assert len(head) > 2 and head[1].strip().splitlines()[1].startswith("==="), f"{path.name}: no title docstring"
    env = {**os.environ, "IRIS_BACKEND": "cpu"}
    env.pop("IRIS_SANITIZE", None)  # a tutorial that shows the race detector turns it on itself
    proc = subprocess.run([sys.executable, str(path)], capture_output=True, text=True, timeout=600, env=env,
                          cwd=path.parent.parent)
    assert proc.returncode == 0, f"{path.name} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
