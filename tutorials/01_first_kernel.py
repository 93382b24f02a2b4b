"""
Your first kernel: a store into a peer's heap
=============================================

Two ranks, one kernel: each rank writes a block of numbers into its neighbour's copy of a tensor, and reads what
its other neighbour wrote into its own. No GPU is needed: without one, iris runs the same kernel in Triton's
interpreter, one process per rank, over shared memory.
"""

# %%
# ``import iris`` comes before ``import triton``: on the cpu backend iris switches Triton to its interpreter, which
# Triton reads once, when it is imported.
import torch

import iris
import triton
import triton.language as tl


# %%
# The kernel. ``data`` and ``inbox`` are tensors on the symmetric heap: each rank has its own copy, at the same
# offset in every rank's heap. ``iris.store`` takes a pointer into *our* heap and stores to the same place in the
# ``peer``'s heap (``heap_bases`` tells it where every rank's heap is mapped in this process).
@triton.jit
def send_right(data, inbox, n, heap_bases, rank, peer, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    values = tl.load(data + offs, mask=mask)  # our own data: a plain load
    iris.store(inbox + offs, values, rank, peer, heap_bases, mask=mask)  # into the peer's inbox


# %%
# Each rank runs ``main``. ``iris.iris`` makes the rank's context (every rank makes one, with the same heap size);
# ``ctx.full`` and ``ctx.zeros`` allocate on the heap, like ``torch.full`` and ``torch.zeros``. The first barrier
# makes sure every inbox exists before anyone writes into it; the second that every write has landed before we
# read.
def main(n=100, BLOCK=64):
    ctx = iris.iris(heap_size=1 << 20)
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    data = ctx.full((n,), float(rank + 1))
    inbox = ctx.zeros(n)
    ctx.barrier()
    send_right[(triton.cdiv(n, BLOCK),)](data, inbox, n, ctx.get_heap_bases(), rank, (rank + 1) % world,
                                         BLOCK=BLOCK)
    ctx.barrier()
    left = (rank - 1) % world
    assert torch.equal(inbox.cpu(), torch.full((n,), float(left + 1))), inbox
    print(f"rank {rank}: received {n} values of {left + 1.0} from rank {left}")


# %%
# ``iris.run(main, 2)`` starts two rank processes and runs ``main`` in each; under ``torchrun`` it runs this rank's
# ``main`` instead.
if __name__ == "__main__":
    iris.run(main, 2)
