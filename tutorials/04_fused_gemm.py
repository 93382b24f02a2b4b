"""
A GEMM and its communication in one kernel
==========================================

Tensor parallelism multiplies sharded matrices and then moves the results between ranks. Done in sequence (a GEMM
kernel, then a collective) the links idle while the GEMM runs and the SMs idle while the links run. A fused kernel
overlaps them at tile granularity: each tile goes to its ranks as soon as it is computed.

The paper's taxonomy of the ways to do it, each of which iris's examples implement (``examples/30`` to ``37``):

.. code-block:: text

    bulk-synchronous          GEMM kernel ........|  collective kernel ....|
    fused, sequential         [tile, store it] [tile, store it] ...  (one kernel, every program does both)
    producer-consumer         GEMM kernel:  tile -> flag  tile -> flag ...
                              comm kernel:       wait -> store  wait -> store ...   (two streams)
    workgroup-specialised     one kernel: programs 0..G-1 compute tiles and raise flags,
                                          programs G..  wait on the flags and store the tiles

``ctx.ops`` holds the fused ops: ``matmul_all_gather``, ``all_gather_matmul``, ``matmul_all_reduce`` and
``matmul_reduce_scatter``. Here every rank holds ``A`` [M, K] and its column block ``B_r`` [K, N / W]; the result
``cat([A @ B_r for every rank r], dim=1)`` lands in every rank's ``out``.
"""

# %%
import torch

import iris


def main(M=64, K=64, N_PER_RANK=32):
    ctx = iris.iris(heap_size=1 << 22)
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    gen = torch.Generator().manual_seed(0)
    A = torch.randn(M, K, generator=gen)  # the same on every rank (the same seed)
    Bs = [torch.randn(K, N_PER_RANK, generator=gen) for _ in range(world)]  # every rank's block, to check with
    dev = ctx.get_device()
    out = ctx.full((M, N_PER_RANK * world), float("nan"))  # on the heap: peers store their tiles into it
    ctx.barrier()
    ctx.ops.matmul_all_gather(out, A.to(dev), Bs[rank].to(dev))
    ctx.barrier()
    expected = torch.cat([A.double() @ B.double() for B in Bs], dim=1)
    error = ((out.cpu().double() - expected).abs().max() / expected.abs().max()).item()
    assert error < 1e-5, error
    print(f"rank {rank}: out [{M}, {N_PER_RANK * world}] matches torch (relative error {error:.1e})")


# %%
# What it looks like on two H200s, traced (``examples/40_trace_gemm_all_scatter.py``): each SM computes a 128 x 256
# tile in about 40 us and stores it to both ranks in 5-10 us, while the next tile starts.
#
# .. image:: /img/trace_gemm_all_scatter.png
#    :alt: the timeline of a traced GEMM + all-scatter on two H200s: per SM, tiles computed and stored
#
# The measured speed of each fused op against cuBLAS followed by NCCL is in the results page.

if __name__ == "__main__":
    iris.run(main, 2)
