"""
Moving code from upstream Iris
==============================

iris follows AMD's Iris: a program written for it runs here unchanged, on NVIDIA GPUs or on the cpu backend. Its
names mean what they mean there, its module paths are importable, and its spellings of arguments are accepted where
they are declared. This tutorial is a program in upstream's style, with the names it uses.

What differs is what the hardware differs in: AMD-only launch options (``waves_per_eu``, ``matrix_instr_nonkdim``)
are dropped on NVIDIA with one note each, ``iris.hip.get_num_xcc()`` is 1, and a Gluon layout of 64 threads a warp (an
AMD wavefront) must say 32. ``scripts/run_upstream.py`` runs upstream's own examples and tests against this iris.
"""

# %%
import torch

import iris
import triton
import triton.language as tl
from iris.mem.triton.context import Context  # upstream's newest module path for the device context


# %%
# Upstream's device context: one int64 tensor (``shmem.get_device_context()``) gives a kernel its rank, the world
# size and the heap bases; ``ctx.load`` / ``ctx.store`` / ``ctx.atomic_add`` are the device API with them bound.
@triton.jit
def gather_from_all(context, local, gathered, n, RANK: tl.constexpr, WORLD_SIZE: tl.constexpr, BLOCK: tl.constexpr):
    ctx = Context.initialize(context, RANK, WORLD_SIZE)
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    for peer in tl.static_range(WORLD_SIZE):
        values = ctx.load(local + offs, from_rank=peer, mask=mask)  # the peer's copy of `local`
        tl.store(gathered + peer * n + offs, values, mask=mask)


# %%
# The host side as upstream writes it: ``shmem = iris.iris(heap_size)``, upstream's ``iris.ccl.Config`` for a
# collective, and ``shmem.broadcast`` of a Python value (tensors and arrays come back as numpy arrays, as upstream's
# contract says).
def main(n=8):
    shmem = iris.iris(1 << 20)
    rank, world = shmem.get_rank(), shmem.get_num_ranks()
    local = shmem.full((n,), float(rank))
    gathered = shmem.zeros(world * n)
    shmem.barrier()
    gather_from_all[(1,)](shmem.get_device_context(), local, gathered, n, RANK=rank, WORLD_SIZE=world, BLOCK=8)
    assert torch.equal(gathered.cpu(), torch.arange(world, dtype=torch.float32).repeat_interleave(n))

    out = shmem.zeros(n)
    shmem.ccl.all_reduce(out, local, config=iris.ccl.Config(comm_sms=4, all_reduce_variant="two_shot"))
    shmem.barrier()
    assert torch.equal(out.cpu(), torch.full((n,), float(sum(range(world)))))

    seed = shmem.broadcast(1234 if rank == 0 else None, src=0)
    assert seed == 1234
    shmem.barrier()
    print(f"rank {rank}: upstream's device context, ccl.Config and broadcast ran as upstream's programs use them")


if __name__ == "__main__":
    iris.run(main, 2)
