"""All-Gather + GEMM, push: each rank pushes its A rows to every rank, and the GEMM waits per row block.

Rank r holds A_r [M / W, K] and the same B [K, N] as everyone; every rank computes
cat(A_0 .. A_{W-1}) @ B. Program p first pushes row block p of its A into every rank's gathered A and raises
that block's flag there (release); then it computes the output tiles of row block p of every rank, each
after acquiring the block's flag. Our own block is ready at once, so the GEMM starts on it while the peers'
blocks are still on the link. Compare 36 (pull: no gathered copy, remote reads inside the K loop).

    program p:  [ push A block p to every rank, flag ][ wait flag of (q, p) -> tiles of rows (q, p) ] q = r, r+1..

    python examples/37_all_gather_gemm_push.py [--world-size 2] [--m 64 --n 64 --k 96]
"""

import argparse

import torch

import iris  # before triton: on the cpu backend this switches Triton to its interpreter
import triton
import triton.language as tl
from iris.ops import reference
from iris.ops.gemm import mainloop

iris.set_logger_level(iris.INFO)  # the ranks print ctx.info lines as HH:MM:SS INFO [Iris] [rank/world] ...

SEED = 1234
BM, BN, BK = 32, 32, 32


@triton.jit
def all_gather_gemm_push_kernel(a, gathered, b, out, flags, M_local, N, K, heap_bases, rank,
                                WORLD_SIZE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                                BLOCK_K: tl.constexpr):
    blk = tl.program_id(0)  # one program per row block of a rank's A
    blocks = M_local // BLOCK_M
    rows = blk * BLOCK_M + tl.arange(0, BLOCK_M)
    # ---- push: our row block into every rank's gathered A, then its flag (release covers the stores)
    for k0 in range(0, K, BLOCK_K):
        cols = k0 + tl.arange(0, BLOCK_K)
        mask = cols[None, :] < K
        piece = tl.load(a + rows[:, None] * K + cols[None, :], mask=mask)
        for i in range(WORLD_SIZE):
            iris.store(gathered + (rank * M_local + rows)[:, None] * K + cols[None, :], piece, rank,
                       (rank + i) % WORLD_SIZE, heap_bases, mask=mask)
    for i in range(WORLD_SIZE):
        iris.atomic_add(flags + rank * blocks + blk, 1, rank, (rank + i) % WORLD_SIZE, heap_bases, sem="release",
                        scope="sys")
    # ---- GEMM: row block blk of every rank, ours first, each once its flag is up
    for i in range(WORLD_SIZE):
        owner = (rank + i) % WORLD_SIZE
        while tl.atomic_add(flags + owner * blocks + blk, 0, sem="acquire", scope="sys") < 1:
            pass
        pid_m = owner * blocks + blk
        for pid_n in range(0, tl.cdiv(N, BLOCK_N)):
            # [BLOCK_M, BLOCK_N] fp32
            acc = mainloop(gathered, b, ((K, 1), (N, 1)), WORLD_SIZE * M_local, N, K, pid_m, pid_n,
                           (BLOCK_M, BLOCK_N, BLOCK_K))
            offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
            tl.store(out + (pid_m * BLOCK_M + tl.arange(0, BLOCK_M))[:, None] * N + offs_n[None, :], acc,
                     mask=offs_n[None, :] < N)


def main(m_local, n, k):
    ctx = iris.iris(heap_size=1 << 24)
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    dev = ctx.get_device()
    if m_local % BM:
        raise SystemExit(f"--m {m_local}: rows per rank must be a multiple of {BM} (one program per row block)")
    a_blocks = [torch.randn(m_local, k, generator=torch.Generator().manual_seed(SEED + r)) for r in range(world)]
    b = torch.randn(k, n, generator=torch.Generator().manual_seed(SEED + 100))
    gathered = ctx.full((world * m_local, k), float("nan"))  # poison: a block used before it lands shows
    flags = ctx.zeros(world * (m_local // BM), dtype=torch.int32)
    out = torch.full((world * m_local, n), float("nan"), device=dev)

    ctx.device_barrier()  # every rank's flags are zeroed before anyone raises one
    all_gather_gemm_push_kernel[(m_local // BM,)](a_blocks[rank].to(dev), gathered, b.to(dev), out, flags, m_local, n,
                                                 k, ctx.get_heap_bases(), rank, WORLD_SIZE=world, BLOCK_M=BM,
                                                 BLOCK_N=BN, BLOCK_K=BK)

    # fp32 operands go through tf32 on GPUs (10-bit mantissa): sums of 96 products land up to ~0.03 off
    torch.testing.assert_close(out.cpu().double(), reference.all_gather_matmul(a_blocks, b), rtol=2e-2, atol=0.1)
    if rank == 0:
        ctx.info(f"all_gather_gemm_push: {world * (m_local // BM)} row blocks pushed, each GEMM'd once it landed")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--m", type=int, default=64, help="rows of A per rank")
    parser.add_argument("--n", type=int, default=64)
    parser.add_argument("--k", type=int, default=96)
    args = parser.parse_args()
    iris.run(main, args.world_size, args.m, args.n, args.k)
