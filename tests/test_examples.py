"""Every numbered example runs at small size and reports success.

Each example is run as its own command (``python examples/NN_name.py --world-size 2``), as a user would, so
this also covers ``iris.run`` starting the ranks. An example checks its own result against a torch
reference and raises on a mismatch; on success rank 0 logs one line ``HH:MM:SS INFO  [Iris] [0/2] name: ...``,
where ``name`` is the file name without its number. New files matching ``examples/[0-9]*.py`` are picked up.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("[0-9]*.py"))
WORLD_SIZE = 2
TIMEOUT_S = 300


def _environment():
    # Without RANK the example starts its own ranks; with it (say, pytest under torchrun) it would not.
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")}
    env.setdefault("IRIS_TIMEOUT_S", "120")  # a hung rank fails the test instead of stalling it
    return env


def test_examples_found():
    assert EXAMPLES, f"no examples matching {ROOT / 'examples' / '[0-9]*.py'}"


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_example(path):
    name = path.stem.split("_", 1)[1]
    proc = subprocess.run([sys.executable, str(path), "--world-size", str(WORLD_SIZE)], cwd=ROOT, env=_environment(),
                          capture_output=True, text=True, timeout=TIMEOUT_S)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"{path.name} exited with {proc.returncode}:\n{output[-6000:]}"
    summary = re.compile(rf"^\d\d:\d\d:\d\d INFO  \[Iris\] \[0/{WORLD_SIZE}\] {re.escape(name)}: ", re.MULTILINE)
    assert summary.search(output), (f"{path.name}: no summary line '[Iris] [0/{WORLD_SIZE}] {name}: ...'; end the "
                                    f"example with `if rank == 0: ctx.info(f\"{name}: ...\")`. "
                                    f"Output:\n{output[-3000:]}")


def test_readme_kernel_runs(tmp_path):
    """The README's first kernel, as a reader would save and run it."""
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"## A kernel\n.*?```python\n(.*?)```", readme, re.S).group(1)
    assert "iris.wait_until" in block and "iris.run(main, 2)" in block
    path = tmp_path / "readme_kernel.py"
    path.write_text(block)
    proc = subprocess.run([sys.executable, str(path)], cwd=ROOT, env=_environment(), capture_output=True, text=True,
                          timeout=TIMEOUT_S)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    assert "[Iris] [0/2] received 1000 values from rank 1" in output and "[Iris] [1/2] received 1000 values from " \
        "rank 0" in output, output[-3000:]
