"""The symmetric heap: PyTorch-style tensors that land at the same offset on every rank.

Creates tensors with the heap factories, checks their values against the plain torch calls (the random ones
give every rank the same values unless given a generator of the rank's own), checks that
they are on the heap (and a plain torch tensor is not), and checks that every allocation sits at the same
offset from the heap base on every rank: the property that lets a kernel reach a peer's copy of a tensor
by swapping the base. Also shows ``allocate_symmetric``, which returns each peer's address of the tensor.

    python examples/01_heap_basics.py [--world-size 2] [--n 1000]
"""

import argparse

import torch

import iris  # before triton: on the cpu backend this switches Triton to its interpreter

iris.set_logger_level(iris.INFO)  # the ranks print ctx.info lines as HH:MM:SS INFO [Iris] [rank/world] ...

SEED = 1234


def main(n):
    torch.manual_seed(SEED)  # rank 0's seed at iris.iris() seeds the random factories' one stream
    ctx = iris.iris(heap_size=(1 << 20) + 64 * n)
    rank, world_size = ctx.get_rank(), ctx.get_num_ranks()
    device = ctx.get_device()
    # Each heap factory, then the plain torch call it must match. Allocation is collective: every rank makes
    # the same calls in the same order. The random factories give every rank the same values; a generator of
    # the rank's own gives data of its own.
    own = torch.Generator(device).manual_seed(SEED + rank)
    heap = {
        "zeros": ctx.zeros(n, dtype=torch.float32),
        "ones": ctx.ones(3, n, dtype=torch.bfloat16),
        "full": ctx.full((n,), rank + 7, dtype=torch.int32),
        "arange": ctx.arange(n),
        "linspace": ctx.linspace(-1.0, 1.0, n),
        "randn": ctx.randn(n),
        "randint": ctx.randint(-100, 100, (n,), dtype=torch.int32),
        "randn_own": ctx.randn(n, generator=own),
    }
    heap["zeros_like"] = ctx.zeros_like(heap["randn"])
    shared, own = torch.Generator(device).manual_seed(SEED), torch.Generator(device).manual_seed(SEED + rank)
    ref = {
        "zeros": torch.zeros(n, dtype=torch.float32),
        "ones": torch.ones(3, n, dtype=torch.bfloat16),
        "full": torch.full((n,), rank + 7, dtype=torch.int32),
        "arange": torch.arange(n),
        "linspace": torch.linspace(-1.0, 1.0, n),
        "randn": torch.randn(n, device=device, generator=shared),
        "randint": torch.randint(-100, 100, (n,), dtype=torch.int32, device=device, generator=shared),
        "randn_own": torch.randn(n, device=device, generator=own),
        "zeros_like": torch.zeros(n),
    }

    for name, tri in heap.items():
        if not torch.equal(tri, ref[name].to(device)):
            raise AssertionError(f"rank {rank}: ctx.{name} differs from torch.{name}")
        if not ctx.is_symmetric(tri):
            raise AssertionError(f"rank {rank}: ctx.{name} returned a tensor that is not on the heap")
    if ctx.is_symmetric(torch.zeros(n, device=device)):
        raise AssertionError(f"rank {rank}: a plain torch tensor claims to be on the heap")

    # heap_bases[r] is where rank r's heap appears in this process; ours is our own heap's address.
    heap_bases = ctx.get_heap_bases().tolist()
    offsets = [tri.data_ptr() - heap_bases[rank] for tri in heap.values()]

    # allocate_symmetric: peer_bases[r] is this tensor's address on rank r, as this process sees it.
    buf, peer_bases = ctx.allocate_symmetric(n, dtype=torch.float32)
    peer_bases = peer_bases.tolist()
    if peer_bases[rank] != buf.data_ptr():
        raise AssertionError(f"rank {rank}: peer_bases[{rank}]={peer_bases[rank]} but data_ptr={buf.data_ptr()}")
    offsets.append(buf.data_ptr() - heap_bases[rank])
    if len({p - b for p, b in zip(peer_bases, heap_bases)}) != 1:
        raise AssertionError(f"rank {rank}: allocate_symmetric offsets differ across ranks: {peer_bases}")

    # Every rank compares its offsets with every other rank's (ctx.broadcast from each source in turn).
    for src in range(world_size):
        theirs = ctx.broadcast(offsets if rank == src else None, src=src)
        if theirs != offsets:
            raise AssertionError(f"rank {rank}: heap offsets {offsets} differ from rank {src}'s {theirs}")

    ctx.barrier()
    if rank == 0:
        ctx.info(f"heap_basics: {len(offsets)} tensors at offsets {offsets} on all {world_size} ranks; "
                 "values match torch")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=2)
    # Under torchrun pass --size: torchrun's own parser takes --n for one of its options.
    parser.add_argument("--n", "--size", dest="n", type=int, default=1000)
    args = parser.parse_args()
    iris.run(main, args.world_size, args.n)
