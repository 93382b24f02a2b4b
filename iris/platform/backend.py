"""Backend choice: the one decision made at import time.

``IRIS_BACKEND`` picks one of:

- ``cuda``: one GPU per rank (device = local rank modulo the GPU count), compiled Triton;
- ``simulation``: the ``cuda`` backend with several ranks per GPU (device = rank modulo the GPU count),
  so a one-GPU machine runs multi-rank programs;
- ``cpu``: POSIX shared memory and the Triton interpreter, one process per rank.

Left unset, it is ``cuda`` when a GPU is visible, else ``cpu``. The interpreter is switched on by
``TRITON_INTERPRET=1``, which Triton reads when it is imported, so on the CPU backend ``import iris`` must
come before anything imports triton, or the variable must already be set.
"""

import os
import sys
from typing import Literal, get_args

Backend = Literal["cuda", "simulation", "cpu"]
BACKENDS = get_args(Backend)


def _gpu_visible():
    import torch

    return torch.cuda.is_available()


def choose_backend():
    name = os.environ.get("IRIS_BACKEND", "").strip().lower()
    if not name:
        return "cuda" if _gpu_visible() else "cpu"
    if name not in BACKENDS:
        raise ValueError(f"IRIS_BACKEND={name!r} is not a backend; use one of {', '.join(BACKENDS)} or leave it unset")
    return name


def require_gpus(backend, caller):
    """Raise a clear ``RuntimeError`` naming ``caller`` when ``backend`` runs on GPUs and torch sees none (a CPU build
    of torch, or no device visible)."""
    if backend == "cpu":
        return
    import torch

    if not torch.cuda.is_available():
        build = "a CPU build of torch" if torch.version.cuda is None else "no GPU visible"
        raise RuntimeError(f"{caller}: IRIS_BACKEND={backend} runs on GPUs, but torch {torch.__version__} sees none "
                           f"({build}); unset IRIS_BACKEND or set IRIS_BACKEND=cpu for the cpu backend")


def enable_interpreter():
    """Make sure Triton runs kernels in its interpreter; fail clearly when it is too late to switch."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        return
    if "triton" in sys.modules:
        raise ImportError(
            "iris: the cpu backend runs kernels in the Triton interpreter, but triton was imported before iris "
            "without TRITON_INTERPRET=1; set TRITON_INTERPRET=1 in the environment, or import iris first")
    os.environ["TRITON_INTERPRET"] = "1"


BACKEND = choose_backend()
DEBUG = os.environ.get("IRIS_DEBUG", "") == "1"
if DEBUG:
    os.environ.setdefault("TRITON_DEBUG", "1")  # device asserts are compiled only in debug builds
if BACKEND == "cpu":
    enable_interpreter()
