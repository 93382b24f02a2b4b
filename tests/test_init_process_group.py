"""``dist.init_process_group("iris")`` as the README shows it: the first line of a program that ``iris.run`` starts
(``iris.launch`` under it), and of one that torchrun starts. The iris group is then the default group, and torch's
collectives on it run our kernels: checked element by element against a torch reference (the gathered output
poisoned first; the all_reduce is in place, as torch's is)."""

import ast
import inspect
import os
import subprocess
import sys

import iris


def check_default_group():
    """The body both programs run once the default group is made: (what failed, what the default group is)."""
    import torch
    import torch.distributed as dist

    import iris
    import iris.distributed

    rank, world = dist.get_rank(), dist.get_world_size()
    on_cpu = iris.platform.backend.BACKEND == "cpu"
    device = torch.device("cpu") if on_cpu else torch.device("cuda", torch.cuda.current_device())
    n = 37 * 7  # no multiple of a block
    data = [torch.arange(n, dtype=torch.int64) * (r + 1) + 3 * r + 1 for r in range(world)]  # non-zero
    fails = []
    for call in range(2):  # the second call takes the remembered route
        tri = data[rank].to(device, copy=True)
        dist.all_reduce(tri)
        ref = sum(data)
        if not torch.equal(tri.cpu(), ref):
            fails.append(f"all_reduce call {call}: {(tri.cpu() != ref).sum().item()} of {n} elements differ")
    gathered = torch.full((world * n,), -7, dtype=torch.int64, device=device)
    dist.all_gather_into_tensor(gathered, data[rank].to(device))
    if not torch.equal(gathered.cpu(), torch.cat(data)):
        fails.append("all_gather_into_tensor differs from torch.cat of the ranks' tensors")
    ctx = iris.distributed.get_context()
    return fails, (type(dist.group.WORLD).__name__, dist.get_backend(), type(ctx).__name__)


def _readme_program():
    """What a user writes under ``iris.run``: the README's line first."""
    import torch.distributed as dist

    import iris.distributed  # noqa: F401 - registers the backend

    dist.init_process_group("iris")
    return check_default_group()


def test_init_process_group_under_iris_run():
    assert "RANK" not in os.environ, "run the tests without torchrun: iris.run would not start ranks"
    for fails, found in iris.run(_readme_program, 2):
        assert not fails, fails
        assert found == ("IrisProcessGroup", "iris", "Iris"), found


_TORCHRUN_PROGRAM = """
import os
import pathlib

import torch.distributed as dist

import iris
import iris.distributed

{checks}

def main():
    dist.init_process_group("iris")
    fails, found = check_default_group()
    pathlib.Path(os.environ["RESULT_DIR"], f"rank{{dist.get_rank()}}").write_text(repr((fails, found)))


if __name__ == "__main__":
    iris.run(main, 2)  # under torchrun: this rank's main()
"""


def test_init_process_group_under_torchrun(tmp_path):
    script = tmp_path / "readme_program.py"
    script.write_text(_TORCHRUN_PROGRAM.format(checks=inspect.getsource(check_default_group)))
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")}
    env.update(RESULT_DIR=str(tmp_path), IRIS_TIMEOUT_S="120")
    if iris.platform.backend.BACKEND == "cpu":
        env.update(IRIS_BACKEND="cpu", TRITON_INTERPRET="1")
    env.pop("IRIS_LAUNCH_LOG", None)  # its kernels are the pools' too
    port = iris.host.launcher._free_port()
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node=2", "--master-addr=127.0.0.1",
               f"--master-port={port}", str(script)]
    proc = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-4000:]
    for rank in range(2):
        fails, found = ast.literal_eval((tmp_path / f"rank{rank}").read_text())
        assert not fails, (rank, fails)
        assert found == ("IrisProcessGroup", "iris", "Iris"), (rank, found)
