"""GEMM + All-Scatter, bulk-synchronous: a GEMM kernel, then a communication kernel.

Every rank computes C_r = A @ B_r (its column block of the product) with the shared GEMM, then a second
kernel copies C_r into that column block of every rank's ``out``. Nothing overlaps: the link idles while
the GEMM runs and the tensor cores idle while the copy runs. This is the baseline the other three
schedules (31-33) improve on; ``ctx.ops.matmul_all_gather(..., config=OpsConfig(variant="bulk"))`` is the
library's version of it.

    timeline (one rank):  [ GEMM ....................... ][ scatter ........ ]

    python examples/30_gemm_all_scatter_bulk.py [--world-size 2] [--m 128 --n 64 --k 96]
"""

import argparse

import torch

import iris  # before triton: on the cpu backend this switches Triton to its interpreter
import triton
import triton.language as tl
from iris.ops import OpsConfig, reference
from iris.ops.gemm import matmul

iris.set_logger_level(iris.INFO)  # the ranks print ctx.info lines as HH:MM:SS INFO [Iris] [rank/world] ...

SEED = 1234


@triton.jit
def scatter_kernel(c, out, M, N_local, heap_bases, rank, WORLD_SIZE: tl.constexpr, BLOCK_M: tl.constexpr,
                   BLOCK_N: tl.constexpr):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N_local)
    tile = tl.load(c + offs_m[:, None] * N_local + offs_n[None, :], mask=mask)  # [BLOCK_M, BLOCK_N]
    dst = out + offs_m[:, None] * (WORLD_SIZE * N_local) + (rank * N_local + offs_n)[None, :]
    for peer in range(WORLD_SIZE):
        iris.store(dst, tile, rank, peer, heap_bases, mask=mask)


def main(m, n, k):
    ctx = iris.iris(heap_size=1 << 24)
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    dev = ctx.get_device()
    a = torch.randn(m, k, generator=torch.Generator().manual_seed(SEED))
    bs = [torch.randn(k, n, generator=torch.Generator().manual_seed(SEED + 1 + r)) for r in range(world)]
    c = torch.empty(m, n, device=dev)
    out = ctx.full((m, world * n), float("nan"))  # poison

    ctx.barrier()  # no rank still reads its out
    matmul(c, a.to(dev), bs[rank].to(dev), OpsConfig())  # kernel 1: GEMM
    scatter_kernel[(triton.cdiv(m, 32), triton.cdiv(n, 32))](c, out, m, n, ctx.get_heap_bases(), rank,
                                                              WORLD_SIZE=world, BLOCK_M=32, BLOCK_N=32)  # kernel 2
    ctx.barrier()  # every rank's block has landed

    torch.testing.assert_close(out.cpu().double(), reference.matmul_all_gather(a, bs), rtol=2e-2, atol=2e-2)
    if rank == 0:
        ctx.info(f"gemm_all_scatter_bulk: [{m}, {world * n}] = A @ [B_0 .. B_{world - 1}] on every rank")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--m", type=int, default=128)
    parser.add_argument("--n", type=int, default=64)
    parser.add_argument("--k", type=int, default=96)
    args = parser.parse_args()
    iris.run(main, args.world_size, args.m, args.n, args.k)
