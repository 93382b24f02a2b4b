"""All-Gather + GEMM, pull: the GEMM reads each row block of A straight from the rank that owns it.

Rank r holds A_r [M / W, K] (on the heap) and the same B [K, N] as everyone; every rank computes
cat(A_0 .. A_{W-1}) @ B. Nothing is gathered first: a tile whose rows belong to rank q loads its A tiles
from q's heap inside the K loop (``mainloop(..., REMOTE_A=True, remote=...)``), so the transfer of one K step overlaps
the tensor-core work of the previous one. ``ctx.ops.all_gather_matmul`` is this kernel. Compare 37 (push).

    program p, tile of rank q's rows:  [ K loop: load A_q tile over the link, B tile locally, dot ] -> out

    python examples/36_all_gather_gemm_pull.py [--world-size 2] [--m 64 --n 64 --k 96]
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
def all_gather_gemm_pull_kernel(a, b, out, M_local, N, K, heap_bases, rank, WORLD_SIZE: tl.constexpr,
                                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    M = WORLD_SIZE * M_local
    num_pid_m, num_pid_n = tl.cdiv(M, BLOCK_M), tl.cdiv(N, BLOCK_N)
    for tile in range(tl.program_id(0), num_pid_m * num_pid_n, tl.num_programs(0)):
        pid_m, pid_n = tile_coords(tile, num_pid_m, num_pid_n, 8)
        # ---- the fused part: whose rows these are, and where they sit in that rank's A
        owner = (pid_m * BLOCK_M) // M_local
        a_owner = a - owner * M_local * K  # global row g is row g - owner * M_local of the owner's A
        acc = mainloop(a_owner, b, ((K, 1), (N, 1)), M, N, K, pid_m, pid_n, (BLOCK_M, BLOCK_N, BLOCK_K),
                       REMOTE_A=True, remote=(rank, owner, heap_bases))  # [BLOCK_M, BLOCK_N] fp32
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
        mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
        tl.store(out + offs_m[:, None] * N + offs_n[None, :], acc, mask=mask)


def main(m_local, n, k):
    ctx = iris.iris(heap_size=1 << 24)
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    dev = ctx.get_device()
    if m_local % BM:
        raise SystemExit(f"--m {m_local}: rows per rank must be a multiple of {BM} (a tile has one owner)")
    a_blocks = [torch.randn(m_local, k, generator=torch.Generator().manual_seed(SEED + r)) for r in range(world)]
    b = torch.randn(k, n, generator=torch.Generator().manual_seed(SEED + 100))
    a = ctx.empty(m_local, k)
    a.copy_(a_blocks[rank])
    out = torch.full((world * m_local, n), float("nan"), device=dev)  # poison
    tiles = triton.cdiv(world * m_local, BM) * triton.cdiv(n, BN)

    ctx.device_barrier()  # every rank's A is in place before anyone reads it
    all_gather_gemm_pull_kernel[(max(1, tiles // 2),)](a, b.to(dev), out, m_local, n, k, ctx.get_heap_bases(), rank,
                                                      WORLD_SIZE=world, BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK)
    ctx.device_barrier()  # nobody still reads our A

    # fp32 operands go through tf32 on GPUs (10-bit mantissa): sums of 96 products land up to ~0.03 off
    torch.testing.assert_close(out.cpu().double(), reference.all_gather_matmul(a_blocks, b), rtol=2e-2, atol=0.1)
    if rank == 0:
        ctx.info(f"all_gather_gemm_pull: [{world * m_local}, {n}] from {world} ranks' A blocks, none gathered first")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--m", type=int, default=64, help="rows of A per rank")
    parser.add_argument("--n", type=int, default=64)
    parser.add_argument("--k", type=int, default=96)
    args = parser.parse_args()
    iris.run(main, args.world_size, args.m, args.n, args.k)
