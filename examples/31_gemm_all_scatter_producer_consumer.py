"""GEMM + All-Scatter, producer-consumer: two kernels on two streams, synchronised per tile.

The GEMM kernel (producer) publishes each finished tile with a release flag; the scatter kernel
(consumer, a few programs on a second stream) acquires each tile's flag and sends the tile to every rank
while the GEMM computes the next ones. Added to the bulk version: the flag store, the flag wait, and a
second stream. Flags hold an epoch (the call number), so they are never reset between calls.

    stream 1:  [ tile 0 ][ tile 1 ][ tile 2 ] ...
    stream 2:            [ send 0 ][ send 1 ][ send 2 ] ...

On the cpu backend kernels run one after the other, so the producer is launched first and the consumer
finds every flag already set; on GPUs they run at once.

    python examples/31_gemm_all_scatter_producer_consumer.py [--world-size 2] [--m 128 --n 64 --k 96]
"""

import argparse
import contextlib

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
def gemm_producer(a, b, c, flags, M, N, K, epoch, heap_bases, rank, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                  BLOCK_K: tl.constexpr):
    num_pid_m, num_pid_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    for tile in range(tl.program_id(0), num_pid_m * num_pid_n, tl.num_programs(0)):
        pid_m, pid_n = tile_coords(tile, num_pid_m, num_pid_n, 8)
        # [BLOCK_M, BLOCK_N] fp32
        acc = mainloop(a, b, ((K, 1), (N, 1)), M, N, K, pid_m, pid_n, (BLOCK_M, BLOCK_N, BLOCK_K))
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        tl.store(c + offs_m[:, None] * N + offs_n[None, :], acc, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))
        # ---- publish the tile (release: the program synchronises first, so every warp's stores are covered)
        iris.atomic_xchg(flags + tile, epoch, rank, rank, heap_bases, sem="release", scope="gpu")


@triton.jit
def scatter_consumer(c, out, flags, M, N, epoch, heap_bases, rank, WORLD_SIZE: tl.constexpr, BLOCK_M: tl.constexpr,
                     BLOCK_N: tl.constexpr):
    num_pid_m, num_pid_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    for tile in range(tl.program_id(0), num_pid_m * num_pid_n, tl.num_programs(0)):
        while tl.atomic_add(flags + tile, 0, sem="acquire", scope="gpu") < epoch:  # ---- wait for the tile
            pass
        pid_m, pid_n = tile_coords(tile, num_pid_m, num_pid_n, 8)
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
        tile_c = tl.load(c + offs_m[:, None] * N + offs_n[None, :], mask=mask)  # [BLOCK_M, BLOCK_N]
        dst = out + offs_m[:, None] * (WORLD_SIZE * N) + (rank * N + offs_n)[None, :]
        for peer in range(WORLD_SIZE):
            iris.store(dst, tile_c, rank, peer, heap_bases, mask=mask)


def main(m, n, k, rounds):
    ctx = iris.iris(heap_size=1 << 24)
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    dev = ctx.get_device()
    a = torch.randn(m, k, generator=torch.Generator().manual_seed(SEED)).to(dev)
    bs = [torch.randn(k, n, generator=torch.Generator().manual_seed(SEED + 1 + r)) for r in range(world)]
    b = bs[rank].to(dev)
    c = torch.empty(m, n, device=dev)
    out = ctx.empty(m, world * n)
    tiles = triton.cdiv(m, BM) * triton.cdiv(n, BN)
    flags = ctx.zeros(tiles, dtype=torch.int32)
    comm_stream = torch.cuda.Stream() if dev.type == "cuda" else None
    for epoch in range(1, rounds + 1):
        out.fill_(float("nan"))  # poison
        ctx.barrier()
        gemm_producer[(max(1, tiles // 2),)](a, b, c, flags, m, n, k, epoch, ctx.get_heap_bases(), rank, BLOCK_M=BM,
                                             BLOCK_N=BN, BLOCK_K=BK)
        with torch.cuda.stream(comm_stream) if comm_stream else contextlib.nullcontext():
            scatter_consumer[(2,)](c, out, flags, m, n, epoch, ctx.get_heap_bases(), rank, WORLD_SIZE=world,
                                   BLOCK_M=BM, BLOCK_N=BN)
        ctx.barrier()  # both streams (barrier synchronises the device) and every rank
        torch.testing.assert_close(out.cpu().double(), reference.matmul_all_gather(a.cpu(), bs), rtol=2e-2,
                                   atol=2e-2)
    if rank == 0:
        ctx.info(f"gemm_all_scatter_producer_consumer: {rounds} rounds of {tiles} tiles, flags never reset")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--m", type=int, default=128)
    parser.add_argument("--n", type=int, default=64)
    parser.add_argument("--k", type=int, default=96)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    iris.run(main, args.world_size, args.m, args.n, args.k, args.rounds)
