"""GEMM + All-Scatter, fused sequential: each tile is sent to every rank right after it is computed.

One persistent kernel. The only lines added to the plain GEMM kernel (``iris/ops/gemm.py``) are the loop
that stores the tile to every rank instead of storing it locally, and a barrier at each end (the output is
free before anyone writes it; every rank's tiles have landed before anyone reads it). The stores of tile i
are in flight while the tensor cores compute tile i + 1. ``ctx.ops.matmul_all_gather`` is this kernel, grown
a stream-K last wave and, on GPUs, the copy engines to carry the bands of tiles finished before the last wave.

    program p:  [ tile ][ send ][ tile ][ send ] ...    (sends drain while the next tile computes)

    python examples/32_gemm_all_scatter_fused.py [--world-size 2] [--m 128 --n 64 --k 96]
"""

import argparse

import torch

import iris  # before triton: on the cpu backend this switches Triton to its interpreter
import triton
import triton.language as tl
from iris.ops import reference
from iris.ops.gemm import mainloop, tile_coords

iris.set_logger_level(iris.INFO)  # the ranks print ctx.info lines as HH:MM:SS INFO [Iris] [rank/world] ...

SEED = 1234
BM, BN, BK = 32, 32, 32


@triton.jit
def gemm_scatter_kernel(a, b, out, M, N, K, heap_bases, rank, WORLD_SIZE: tl.constexpr, BLOCK_M: tl.constexpr,
                        BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    num_pid_m, num_pid_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    for tile in range(tl.program_id(0), num_pid_m * num_pid_n, tl.num_programs(0)):
        pid_m, pid_n = tile_coords(tile, num_pid_m, num_pid_n, 8)
        # [BLOCK_M, BLOCK_N] fp32
        acc = mainloop(a, b, ((K, 1), (N, 1)), M, N, K, pid_m, pid_n, (BLOCK_M, BLOCK_N, BLOCK_K))
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
        # ---- the fused part: our column block of every rank's out, straight from registers
        dst = out + offs_m[:, None] * (WORLD_SIZE * N) + (rank * N + offs_n)[None, :]
        for peer in range(WORLD_SIZE):
            iris.store(dst, acc, rank, peer, heap_bases, mask=mask)


def main(m, n, k):
    ctx = iris.iris(heap_size=1 << 24)
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    dev = ctx.get_device()
    a = torch.randn(m, k, generator=torch.Generator().manual_seed(SEED))
    bs = [torch.randn(k, n, generator=torch.Generator().manual_seed(SEED + 1 + r)) for r in range(world)]
    out = ctx.full((m, world * n), float("nan"))  # poison
    tiles = triton.cdiv(m, BM) * triton.cdiv(n, BN)

    ctx.device_barrier()  # every rank's out is free (on the stream: no host round trip)
    gemm_scatter_kernel[(max(1, tiles // 2),)](a.to(dev), bs[rank].to(dev), out, m, n, k, ctx.get_heap_bases(), rank,
                                               WORLD_SIZE=world, BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK)
    ctx.device_barrier()  # every rank's tiles have landed in our out

    torch.testing.assert_close(out.cpu().double(), reference.matmul_all_gather(a, bs), rtol=2e-2, atol=2e-2)
    if rank == 0:
        ctx.info(f"gemm_all_scatter_fused: {tiles} tiles per rank sent as they were computed")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--m", type=int, default=128)
    parser.add_argument("--n", type=int, default=64)
    parser.add_argument("--k", type=int, default=96)
    args = parser.parse_args()
    iris.run(main, args.world_size, args.m, args.n, args.k)
