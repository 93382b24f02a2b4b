"""GPU tier: the fused ops matmul_all_gather and all_gather_matmul with an output past 2**31 elements, checked
element by element against torch. Ranks share one GPU (simulation) when there are fewer GPUs than ranks, so one
H200 runs it:

    IRIS_BACKEND=simulation python scripts/ops_past_2g.py

By default 2 ranks, out [40960, 57344] bf16: 2.35e9 elements (2**31 = 2.15e9), so every output row past row 37449
starts past 2**31 and the kernels' tile offsets (row * N + column) must be 64-bit. K = 64 keeps the GEMMs short;
A and B hold small integers, so every fp32 sum is exact and rounds to the same bf16 in the kernel and in torch:
the check is exact. Heap per rank: the output (4.7 GB) plus 256 MiB; 9.5 GB on one GPU for two ranks, and as
much again in torch temporaries. Poisons the output with NaN before each op. Prints one line per check and
exits non-zero if any fails. Toy size on the cpu backend: ``--m 64 --n 96 --k 32``.
"""

import argparse
import sys
import time

import torch

import iris
from iris.ops import OpsConfig

ROWS = 4096  # output rows checked at once: a bounded temporary on a shared GPU


def operand(seed, shape, device):
    """Integers in [-2, 2] of a bf16 operand any rank can regenerate: with K <= 64 every dot product is exact."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(-2, 3, shape, generator=gen).to(torch.bfloat16).to(device)


def first_mismatch(out, ref_rows, m):
    """The first (row, column) where ``out`` differs from ``ref_rows(start, count)`` (NaN never matches), or None."""
    for start in range(0, m, ROWS):
        count = min(ROWS, m - start)
        diff = (out[start:start + count] != ref_rows(start, count)).nonzero()
        if diff.numel():
            return start + int(diff[0, 0]), int(diff[0, 1])
    return None


def body(m, n, k, heap_bytes):
    ctx = iris.iris(heap_bytes)
    rank, world, dev = ctx.get_rank(), ctx.get_num_ranks(), ctx.get_device()
    if m % world or n % world:
        raise ValueError(f"ops_past_2g: --m {m} and --n {n} must be multiples of the world size {world}")
    config = OpsConfig(variant="fused")
    out = ctx.empty(m, n, dtype=torch.bfloat16)
    results = []

    def run(name, call, ref_rows):
        out.fill_(float("nan"))
        ctx.barrier()
        start = time.perf_counter()
        call()
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        took = time.perf_counter() - start
        ctx.barrier()
        results.append((f"{name} [{m}, {n}] bf16, {m * n} elements ({took:.2f} s)", first_mismatch(out, ref_rows, m)))

    # matmul_all_gather: out = cat([A @ B_q for q], dim=1); A the same everywhere, B_q rank q's column block
    a = operand(1, (m, k), dev)
    b_blocks = [operand(100 + q, (k, n // world), dev) for q in range(world)]
    b_all = torch.cat(b_blocks, dim=1)
    run("matmul_all_gather", lambda: ctx.ops.matmul_all_gather(out, a, b_blocks[rank], config=config),
        lambda s, c: a[s:s + c] @ b_all)
    del a, b_blocks, b_all

    # all_gather_matmul: out = cat([A_q for q], dim=0) @ B; A_q rank q's row block, B the same everywhere
    a_blocks = [operand(200 + q, (m // world, k), dev) for q in range(world)]
    a_all = torch.cat(a_blocks, dim=0)
    b = operand(2, (k, n), dev)
    run("all_gather_matmul", lambda: ctx.ops.all_gather_matmul(out, a_blocks[rank], b, config=config),
        lambda s, c: a_all[s:s + c] @ b)
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--m", type=int, default=40960, help="output rows")
    parser.add_argument("--n", type=int, default=57344, help="output columns")
    parser.add_argument("--k", type=int, default=64, help="the inner dimension (at most 64: exact checks)")
    args = parser.parse_args()
    if args.k > 64:
        parser.error(f"--k {args.k}: at most 64, or the bf16 sums stop being exact and the check with them")
    heap = -(-(2 * args.m * args.n + (256 << 20)) // (1 << 20)) << 20
    print(f"{args.world_size} ranks, out [{args.m}, {args.n}] bf16 = {args.m * args.n} elements (2**31 = {1 << 31}), "
          f"K = {args.k}, heap {heap / (1 << 30):.2f} GiB per rank", flush=True)
    start = time.perf_counter()
    results = iris.launch(body, args.world_size, args.m, args.n, args.k, heap, timeout_s=900)
    failed = False
    for rank, checks in enumerate(results):
        for name, bad in checks:
            failed |= bad is not None
            print(f"rank {rank}: {name}: {'ok' if bad is None else f'FIRST MISMATCH at (row, column) {bad}'}")
    print(f"total {time.perf_counter() - start:.0f} s")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
