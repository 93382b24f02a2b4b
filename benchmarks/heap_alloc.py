"""What a heap allocation costs: ``ctx.empty`` (allocate and drop) beside ``torch.empty`` and, on GPUs, torch's
symmetric memory (``symm_mem.empty`` + ``rendezvous``), plus an agreement on frees and a growth of the vmem heap.

    python benchmarks/heap_alloc.py [--allocator vmem] [--world-size 2]

Each figure is the median over ranks of each rank's mean over ``--count`` allocate-and-drop rounds (host time: an
allocation queues no device work). Agreements happen inside the loop as they would in a program (every 256
allocations, or once the bytes allocated since the last one pass the bytes then live); ``agreement_us`` times one
on its own.
"""

import argparse
import statistics
import time

import torch

import iris
from iris.host.distributed import all_gather_object

SIZES = (1 << 10, 1 << 20, 64 << 20)


def _mean_us(fn, count):
    fn()
    began = time.perf_counter()
    for _ in range(count):
        fn()
    return (time.perf_counter() - began) / count * 1e6


def main(count, allocator):
    import torch.distributed as dist

    ctx = iris.iris(heap_size=1 << 30, allocator_type=allocator)
    dev = ctx.get_device()
    rows = {}
    for nbytes in SIZES:
        rows[f"iris {nbytes} B"] = _mean_us(lambda: ctx.empty(nbytes, dtype=torch.uint8), count)
        rows[f"torch.empty {nbytes} B"] = _mean_us(lambda: torch.empty(nbytes, dtype=torch.uint8, device=dev), count)
        if dev.type == "cuda":
            try:
                import torch.distributed._symmetric_memory as symm_mem

                def symmetric():
                    t = symm_mem.empty(nbytes, dtype=torch.uint8, device=dev)
                    symm_mem.rendezvous(t, dist.group.WORLD.group_name)

                rows[f"symm_mem.empty+rendezvous {nbytes} B"] = _mean_us(symmetric, max(1, count // 20))
            except Exception as e:  # two ranks on one GPU, or a torch without it
                rows[f"symm_mem.empty+rendezvous {nbytes} B"] = f"failed: {type(e).__name__}: {e}"[:160]
    keep = [ctx.empty(1 << 10, dtype=torch.uint8) for _ in range(100)]
    del keep
    rows["agreement_us"] = _mean_us(ctx.heap.reclaim, 20)
    if ctx.heap.memory.growable:
        ctx.barrier()
        began = time.perf_counter()
        ctx.heap._grow(1 << 30)
        rows["grow_by_1GiB_us"] = (time.perf_counter() - began) * 1e6
    everyone = all_gather_object(rows)
    table = {k: (statistics.median(r[k] for r in everyone) if isinstance(rows[k], float) else rows[k]) for k in rows}
    if ctx.get_rank() == 0:
        for k, v in table.items():
            print(f"{k:45s} {v:10.2f} us" if isinstance(v, float) else f"{k:45s} {v}")
        print("memory_stats", ctx.memory_stats())
    return table


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--allocator", default="torch", choices=("torch", "vmem"))
    parser.add_argument("--world-size", type=int, default=2)
    args = parser.parse_args()
    iris.run(main, args.world_size, args.count, args.allocator)
