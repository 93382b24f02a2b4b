"""The tile API: a GEMM kernel that owns its tile loop and all-reduces each tile with ``iris.x``.

Every rank holds a K-slice (A_r [M, K/W], B_r [K/W, N]) and the result is the sum of the partial products. The
kernel walks its tiles; for each it computes the partial in registers, wraps it as an ``iris.x.Tile``, stages it
in its own heap and stamps the tile's lock with the round number (a release), then calls
``iris.x.all_reduce_two_shot``: the tile's owning rank (tiles split round-robin) waits for every rank's lock,
sums the W partials in rank order 0..W-1 and stores the tile into every rank's output. The locks are never reset:
round k waits for stamp k. Every rank then holds the same bits, which the example checks with a ccl all_gather.

    program p:  [ tile -> partial ][ stage, stamp lock ][ owner: wait W locks, sum in rank order, store to all ] ...

    python examples/38_tile_api.py [--world-size 2] [--m 80 --n 48 --k 64 --rounds 2]
"""

import argparse

import torch

import iris  # before triton: on the cpu backend this switches Triton to its interpreter
import iris.x
import triton
import triton.language as tl
from iris.ops import reference
from iris.ops.gemm import mainloop

iris.set_logger_level(iris.INFO)  # the ranks print ctx.info lines as HH:MM:SS INFO [Iris] [rank/world] ...

SEED = 1234
BM, BN, BK = 32, 32, 32


@triton.jit
def gemm_tile_all_reduce_kernel(a, b, staged, out, locks, context, M, N, K, epoch, RANK: tl.constexpr,
                                WORLD_SIZE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                                BLOCK_K: tl.constexpr):
    ctx = iris.DeviceContext.initialize(context, RANK, WORLD_SIZE)
    src_view = iris.x.make_tensor_view(staged, M, N, N, 1)
    dst_view = iris.x.make_tensor_view(out, M, N, N, 1)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    for t in range(tl.program_id(0), tl.cdiv(M, BLOCK_M) * num_pid_n, tl.num_programs(0)):
        pid_m, pid_n = t // num_pid_n, t % num_pid_n
        acc = mainloop(a, b, ((K, 1), (N, 1)), M, N, K, pid_m, pid_n, (BLOCK_M, BLOCK_N, BLOCK_K))  # [BM, BN] fp32
        tile = iris.x.Tile(pid_m, pid_n, BLOCK_M, BLOCK_N, acc)
        # ---- publish: the partial where peers read it, then the lock stamped with this round (release)
        ptrs, mask = src_view.tile_ptr(tile)
        tl.store(ptrs, acc, mask=mask)
        ctx.atomic_xchg(locks + t, epoch, RANK, sem="release", scope="sys")
        # ---- the owner of tile t sums every rank's partial and stores it into every rank's out
        iris.x.all_reduce_two_shot(tile, src_view, dst_view, locks, RANK, WORLD_SIZE, ctx, epoch)


def main(m, n, k, rounds):
    ctx = iris.iris(heap_size=1 << 24)
    rank, world, dev = ctx.get_rank(), ctx.get_num_ranks(), ctx.get_device()
    tiles = triton.cdiv(m, BM) * triton.cdiv(n, BN)
    staged = ctx.full((m, n), float("nan"))
    out = ctx.empty((m, n))
    gathered = ctx.empty((world * m, n))
    locks = ctx.zeros(tiles, dtype=torch.int32)  # zeroed once; round r stamps r
    # Persistent programs, at most 16: an owner that waits for a peer's tile must not keep the program that
    # stamps it off the GPU (ranks that share one GPU share its SMs).
    programs = min(tiles, 16)
    ctx.barrier()
    for r in range(1, rounds + 1):
        gens = [torch.Generator().manual_seed(SEED + 1000 * r + q) for q in range(world)]
        a_slices = [torch.randn(m, k, generator=g) for g in gens]
        b_slices = [torch.randn(k, n, generator=g) for g in gens]
        out.fill_(float("nan"))  # poison: a tile nobody stored shows
        ctx.barrier()
        gemm_tile_all_reduce_kernel[(programs,)](a_slices[rank].to(dev), b_slices[rank].to(dev), staged, out, locks,
                                                 ctx.get_device_context(), m, n, k, r, RANK=rank, WORLD_SIZE=world,
                                                 BLOCK_M=BM, BLOCK_N=BN, BLOCK_K=BK)
        ctx.barrier()  # every owner's stores into our out have landed; nobody reads our staged partials any more
        # fp32 operands go through tf32 on GPUs (10-bit mantissa): sums of W x K products land up to ~0.05 off
        torch.testing.assert_close(out.cpu().double(), reference.matmul_all_reduce(a_slices, b_slices), rtol=2e-2,
                                   atol=0.1)
        ctx.ccl.all_gather(gathered, out)
        ctx.barrier()
        for q, theirs in enumerate(gathered.cpu().chunk(world)):
            if not torch.equal(theirs.view(torch.int32), out.cpu().view(torch.int32)):
                raise AssertionError(f"tile_api: round {r}: rank {q}'s result differs from rank {rank}'s in its bits")
    if rank == 0:
        ctx.info(f"tile_api: {rounds} rounds of {tiles} tiles, each summed by its owner in rank order; "
                 f"the same bits on all {world} ranks")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--m", type=int, default=80)
    parser.add_argument("--n", type=int, default=48)
    parser.add_argument("--k", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    iris.run(main, args.world_size, args.m, args.n, args.k, args.rounds)
