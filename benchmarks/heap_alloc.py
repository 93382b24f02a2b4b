"""What a heap allocation costs: ``ctx.empty`` (allocate and drop) beside ``torch.empty`` and torch's symmetric
memory (``symm_mem.empty`` + ``rendezvous``), plus an agreement on frees and a growth of the vmem heap.

    python benchmarks/heap_alloc.py [--allocator vmem] [--world-size 2] [--count 2000]

Each figure is the median over ranks of each rank's mean over ``--count`` allocate-and-drop rounds (host time: an
allocation queues no device work; ``--count`` / 20 rounds for symmetric memory, whose rendezvous is an exchange
between ranks). Agreements happen inside the loop as they would in a program (every 256 allocations, or once
the bytes allocated since the last one pass the bytes then live); ``agreement`` times one on its own.
Symmetric memory needs CUDA: n/a on the cpu backend, and the reason when torch refuses it (ranks sharing a GPU
in simulation mode, where the process group is gloo). Keep ``TORCH_SYMM_MEM_DISABLE_MULTICAST=1``.
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


def _symmetric_memory(dev, count):
    """``symm_mem.empty`` + ``rendezvous`` on the world group: a function of the size timing it, or the reason it
    cannot run here."""
    if dev.type != "cuda":
        return "n/a: symmetric memory needs CUDA"
    import torch.distributed as dist

    try:
        import torch.distributed._symmetric_memory as symm_mem

        group = dist.group.WORLD.group_name

        def symmetric(nbytes):
            t = symm_mem.empty(nbytes, dtype=torch.uint8, device=dev)
            symm_mem.rendezvous(t, group)

        symmetric(1 << 10)  # refused here, if at all (a torch without it, ranks sharing a GPU)
    except Exception as e:  # noqa: BLE001 - reported in the table
        return f"n/a: {type(e).__name__}: {e}"[:200]
    return lambda nbytes: _mean_us(lambda: symmetric(nbytes), max(1, count // 20))


def main(count, allocator):
    ctx = iris.iris(heap_size=1 << 30, allocator_type=allocator)
    dev = ctx.get_device()
    symmetric = _symmetric_memory(dev, count)
    refused = symmetric if isinstance(symmetric, str) else None
    # Every rank must know whether every rank can run symmetric memory: its rendezvous is collective.
    if any(all_gather_object(refused)):
        refused = refused or "n/a: refused on another rank"
    rows = {}
    for nbytes in SIZES:
        rows[nbytes] = (_mean_us(lambda: ctx.empty(nbytes, dtype=torch.uint8), count),
                        _mean_us(lambda: torch.empty(nbytes, dtype=torch.uint8, device=dev), count),
                        None if refused else symmetric(nbytes))
    keep = [ctx.empty(1 << 10, dtype=torch.uint8) for _ in range(100)]
    del keep
    extra = {"agreement": _mean_us(ctx.heap.reclaim, 20)}
    if ctx.heap.memory.growable:
        ctx.barrier()
        began = time.perf_counter()
        ctx.heap._grow(1 << 30)
        extra["grow by 1 GiB"] = (time.perf_counter() - began) * 1e6
    everyone = all_gather_object((rows, extra))
    table = {nbytes: tuple(None if cells[0] is None else statistics.median(cells)
                           for cells in zip(*(r[nbytes] for r, _ in everyone))) for nbytes in SIZES}
    extra = {k: statistics.median(e[k] for _, e in everyone) for k in extra}
    if ctx.get_rank() == 0:
        print(f"{ctx.get_num_ranks()} ranks, {ctx.backend} backend, allocator {allocator}; us per allocate-and-drop")
        print(f"{'bytes':>10} {'iris':>10} {'torch.empty':>12} {'symm_mem':>10}")
        for nbytes, (ours, plain, sym) in table.items():
            print(f"{nbytes:>10} {ours:>10.2f} {plain:>12.2f} {'n/a' if sym is None else f'{sym:.2f}':>10}")
        for name, us in extra.items():
            print(f"{name}: {us:.2f} us")
        if refused:
            print(f"symm_mem {refused}")
    return table, extra, refused


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--allocator", default="torch", choices=("torch", "vmem"))
    parser.add_argument("--world-size", type=int, default=2)
    args = parser.parse_args()
    iris.run(main, args.world_size, args.count, args.allocator)
