"""GEMM + All-Scatter, workgroup specialisation: one kernel, some programs compute, the others communicate.

Programs ``[0, COMPUTE)`` run the GEMM and publish each tile with a release flag; programs
``[COMPUTE, COMPUTE + COMM)`` acquire the flags and send the tiles to every rank. Communication gets its
own SMs, so it never takes issue slots from the tensor cores, and the split is one number to tune. Both
kinds must be resident at once (a persistent grid no larger than the GPU), since communicators wait for
computers. The compute programs have the lower ids: the interpreter (cpu backend) runs programs in id
order, so there every flag is set before a communicator looks.

    programs 0..C-1:   [ tile ][ tile ][ tile ] ...   (flag after each)
    programs C..C+S-1:         [ send ][ send ][ send ] ...

    python examples/33_gemm_all_scatter_workgroup_specialized.py [--world-size 2] [--m 128 --n 64 --k 96]
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
def specialized_kernel(a, b, c, out, flags, M, N, K, epoch, heap_bases, rank, WORLD_SIZE: tl.constexpr,
                       COMPUTE: tl.constexpr, COMM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                       BLOCK_K: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_m, num_pid_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    if pid < COMPUTE:
        # ---- compute programs: GEMM tiles, each published with a release flag
        for tile in range(pid, num_pid_m * num_pid_n, COMPUTE):
            pid_m, pid_n = tile_coords(tile, num_pid_m, num_pid_n, 8)
            # [BLOCK_M, BLOCK_N] fp32
            acc = mainloop(a, b, ((K, 1), (N, 1)), M, N, K, pid_m, pid_n, (BLOCK_M, BLOCK_N, BLOCK_K))
            offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
            offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
            tl.store(c + offs_m[:, None] * N + offs_n[None, :], acc,
                     mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))
            iris.atomic_xchg(flags + tile, epoch, rank, rank, heap_bases, sem="release", scope="gpu")
    else:
        # ---- communication programs: wait for a tile, send it to every rank
        for tile in range(pid - COMPUTE, num_pid_m * num_pid_n, COMM):
            while tl.atomic_add(flags + tile, 0, sem="acquire", scope="gpu") < epoch:
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
    c = torch.empty(m, n, device=dev)
    out = ctx.empty(m, world * n)
    tiles = triton.cdiv(m, BM) * triton.cdiv(n, BN)
    flags = ctx.zeros(tiles, dtype=torch.int32)
    compute, comm = max(1, tiles // 2), 2
    for epoch in range(1, rounds + 1):
        out.fill_(float("nan"))  # poison
        ctx.barrier()
        specialized_kernel[(compute + comm,)](a, bs[rank].to(dev), c, out, flags, m, n, k, epoch, ctx.get_heap_bases(),
                                              rank, WORLD_SIZE=world, COMPUTE=compute, COMM=comm, BLOCK_M=BM,
                                              BLOCK_N=BN, BLOCK_K=BK)
        ctx.barrier()
        torch.testing.assert_close(out.cpu().double(), reference.matmul_all_gather(a.cpu(), bs), rtol=2e-2,
                                   atol=2e-2)
    if rank == 0:
        ctx.info(f"gemm_all_scatter_workgroup_specialized: {compute} compute + {comm} communication programs")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--m", type=int, default=128)
    parser.add_argument("--n", type=int, default=64)
    parser.add_argument("--k", type=int, default=96)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    iris.run(main, args.world_size, args.m, args.n, args.k, args.rounds)
