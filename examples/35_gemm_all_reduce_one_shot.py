"""GEMM + All-Reduce, one-shot with per-tile flags: publish each partial tile, then sum every rank's copy.

Every rank holds a K-slice and the result is the sum of the partial products. A program stores its partial
tile in its own heap, raises that tile's flag on every rank (release), waits until every rank has raised it
(acquire), and then reads the W partial tiles and writes the sum. Every rank computes the same tiles in the
same order, so the wait is usually short; the link carries each partial once to each peer (W - 1 reads),
the one-shot trade of bytes for latency. ``ctx.ops.matmul_all_reduce`` instead reduce-scatters then
all-gathers inside the GEMM, which moves fewer bytes at large W.

    program p:  [ tile -> partial ][ flag every rank ][ wait for W flags ][ sum W partials -> out ] ...

    python examples/35_gemm_all_reduce_one_shot.py [--world-size 2] [--m 128 --n 64 --k 96]
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
def gemm_all_reduce_one_shot_kernel(a, b, partial, out, flags, M, N, K, heap_bases, rank, WORLD_SIZE: tl.constexpr,
                                    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    num_pid_m, num_pid_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    for tile in range(tl.program_id(0), num_pid_m * num_pid_n, tl.num_programs(0)):
        pid_m, pid_n = tile_coords(tile, num_pid_m, num_pid_n, 8)
        # [BLOCK_M, BLOCK_N] fp32: our partial
        acc = mainloop(a, b, ((K, 1), (N, 1)), M, N, K, pid_m, pid_n, (BLOCK_M, BLOCK_N, BLOCK_K))
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
        offs = offs_m[:, None] * N + offs_n[None, :]
        tl.store(partial + offs, acc, mask=mask)
        # ---- the fused part: publish the tile, wait for every rank's, sum them
        for peer in range(WORLD_SIZE):
            iris.atomic_add(flags + tile, 1, rank, peer, heap_bases, sem="release", scope="sys")
        while tl.atomic_add(flags + tile, 0, sem="acquire", scope="sys") < WORLD_SIZE:
            pass
        for i in range(1, WORLD_SIZE):
            acc += iris.load(partial + offs, rank, (rank + i) % WORLD_SIZE, heap_bases, mask=mask)
        tl.store(out + offs, acc, mask=mask)


def main(m, n, k):
    ctx = iris.iris(heap_size=1 << 24)
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    dev = ctx.get_device()
    a_slices = [torch.randn(m, k, generator=torch.Generator().manual_seed(SEED + r)) for r in range(world)]
    b_slices = [torch.randn(k, n, generator=torch.Generator().manual_seed(SEED + 100 + r)) for r in range(world)]
    tiles = triton.cdiv(m, BM) * triton.cdiv(n, BN)
    partial = ctx.full((m, n), float("nan"))  # poison: a tile read before it is published shows
    flags = ctx.zeros(tiles, dtype=torch.int32)
    out = torch.full((m, n), float("nan"), device=dev)

    ctx.device_barrier()  # every rank's flags are zeroed before anyone raises one
    gemm_all_reduce_one_shot_kernel[(max(1, tiles // 2),)](a_slices[rank].to(dev), b_slices[rank].to(dev), partial,
                                                          out, flags, m, n, k, ctx.get_heap_bases(), rank,
                                                          WORLD_SIZE=world, BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK)
    ctx.device_barrier()  # nobody still reads our partials

    # fp32 operands go through tf32 on GPUs (10-bit mantissa): sums of 2 x 96 products land up to ~0.05 off
    torch.testing.assert_close(out.cpu().double(), reference.matmul_all_reduce(a_slices, b_slices), rtol=2e-2, atol=0.1)
    if rank == 0:
        ctx.info(f"gemm_all_reduce_one_shot: {tiles} tiles per rank, each summed from {world} published partials")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--m", type=int, default=128)
    parser.add_argument("--n", type=int, default=64)
    parser.add_argument("--k", type=int, default=96)
    args = parser.parse_args()
    iris.run(main, args.world_size, args.m, args.n, args.k)
