"""GEMM + All-Reduce with atomics: each partial tile is added straight into every rank's output.

Every rank holds a K-slice (A_r [M, K / W], B_r [K / W, N]) and the result is the sum of the partial
products. Here each tile of A_r @ B_r is atomically added into the same tile of every rank's ``out`` the
moment it is computed: no staging buffer, no second pass, and the adds of tile i travel while tile i + 1
computes. The price is fp32 atomics on the link (one per element per rank), an ``out`` zeroed first, and
determinism: the adds land in whatever order the ranks' programs reach them, so the ranks' results and two
runs' results may differ in their last bits (the library's reductions sum in one order and do not).
Compare 35 (one-shot with per-tile flags) and ``ctx.ops.matmul_all_reduce`` (reduce-scatter + all-gather
inside the GEMM).

    program p:  [ tile ][ atomic add to every rank ][ tile ][ ... ]

    python examples/34_gemm_all_reduce_atomics.py [--world-size 2] [--m 128 --n 64 --k 96]
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
def gemm_all_reduce_atomic_kernel(a, b, out, M, N, K, heap_bases, rank, WORLD_SIZE: tl.constexpr,
                                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    num_pid_m, num_pid_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    for tile in range(tl.program_id(0), num_pid_m * num_pid_n, tl.num_programs(0)):
        pid_m, pid_n = tile_coords(tile, num_pid_m, num_pid_n, 8)
        # [BLOCK_M, BLOCK_N] fp32: our partial
        acc = mainloop(a, b, ((K, 1), (N, 1)), M, N, K, pid_m, pid_n, (BLOCK_M, BLOCK_N, BLOCK_K))
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
        # ---- the fused part: add the partial into every rank's out (relaxed: the barrier after orders it)
        for i in range(WORLD_SIZE):
            peer = (rank + i) % WORLD_SIZE  # each rank starts on a different peer
            iris.atomic_add(out + offs_m[:, None] * N + offs_n[None, :], acc, rank, peer, heap_bases, mask=mask,
                            sem="relaxed", scope="sys")


def main(m, n, k):
    ctx = iris.iris(heap_size=1 << 24)
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    dev = ctx.get_device()
    a_slices = [torch.randn(m, k, generator=torch.Generator().manual_seed(SEED + r)) for r in range(world)]
    b_slices = [torch.randn(k, n, generator=torch.Generator().manual_seed(SEED + 100 + r)) for r in range(world)]
    out = ctx.zeros((m, n))  # the sum starts at zero on every rank
    tiles = triton.cdiv(m, BM) * triton.cdiv(n, BN)

    ctx.device_barrier()  # every rank's out is zeroed before anyone adds into it
    gemm_all_reduce_atomic_kernel[(max(1, tiles // 2),)](a_slices[rank].to(dev), b_slices[rank].to(dev), out, m, n, k,
                                                        ctx.get_heap_bases(), rank, WORLD_SIZE=world, BLOCK_M=BM,
                                                        BLOCK_N=BN, BLOCK_K=BK)
    ctx.device_barrier()  # every rank's adds have landed in our out

    # fp32 operands go through tf32 on GPUs (10-bit mantissa): sums of 2 x 96 products land up to ~0.05 off
    torch.testing.assert_close(out.cpu().double(), reference.matmul_all_reduce(a_slices, b_slices), rtol=2e-2, atol=0.1)
    if rank == 0:
        ctx.info(f"gemm_all_reduce_atomics: {tiles} partial tiles per rank added into {world} ranks' out")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--m", type=int, default=128)
    parser.add_argument("--n", type=int, default=64)
    parser.add_argument("--k", type=int, default=96)
    args = parser.parse_args()
    iris.run(main, args.world_size, args.m, args.n, args.k)
