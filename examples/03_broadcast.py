"""``ctx.broadcast``: send a host value from one rank to all of them.

Broadcasts a scalar, a dict, a torch tensor and a numpy array, each from a different source rank. Plain
Python objects come back as the same object; tensors and arrays come back as numpy arrays (the data moves
with a tensor broadcast, not through pickling). Every rank checks what it got against the source's value.

    python examples/03_broadcast.py [--world-size 2] [--n 1000]
"""

import argparse

import numpy as np
import torch

import iris  # before triton: on the cpu backend this switches Triton to its interpreter

iris.set_logger_level(iris.INFO)  # the ranks print ctx.info lines as HH:MM:SS INFO [Iris] [rank/world] ...

SEED = 1234


def source_values(src, n):
    """What rank ``src`` broadcasts; every rank can rebuild it (seed SEED + src), which is the reference."""
    torch.manual_seed(SEED + src)
    return {
        "scalar": 3.5 + src,
        "dict": {"name": f"rank {src}", "shape": (n, 4), "dtype": "float32", "tags": ["a", "b"]},
        "tensor": torch.randn(n, 4),
        "numpy": np.random.default_rng(SEED + src).integers(-1000, 1000, size=(n, 3), dtype=np.int64),
    }


def main(n):
    ctx = iris.iris(heap_size=1 << 20)
    rank, world_size = ctx.get_rank(), ctx.get_num_ranks()
    for i, kind in enumerate(("scalar", "dict", "tensor", "numpy")):
        src = i % world_size
        ref = source_values(src, n)[kind]
        value = None
        if rank == src:  # only the source passes a value
            value = ref.to(ctx.get_device()) if kind == "tensor" else ref
        got = ctx.broadcast(value, src=src)

        if kind in ("tensor", "numpy"):
            ref = np.asarray(ref)
            ok = isinstance(got, np.ndarray) and got.dtype == ref.dtype and np.array_equal(got, ref)
        else:
            ok = got == ref
        if not ok:
            raise AssertionError(f"rank {rank}: broadcast of a {kind} from rank {src} gave {got!r}")

    ctx.barrier()
    if rank == 0:
        ctx.info(f"broadcast: a scalar, a dict, a [{n}, 4] tensor and a [{n}, 3] numpy array reached all "
                 f"{world_size} ranks unchanged")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=2)
    # Under torchrun pass --size: torchrun's own parser takes --n for one of its options.
    parser.add_argument("--n", "--size", dest="n", type=int, default=1000)
    args = parser.parse_args()
    iris.run(main, args.world_size, args.n)
