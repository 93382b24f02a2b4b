"""GPU tier: all_gather, all_to_all and reduce_scatter (pull and push) whose element offsets pass 2**31, checked
element by element. Ranks share one GPU (simulation) when there are fewer GPUs than ranks, so one H200 runs it:

    IRIS_BACKEND=simulation python scripts/ccl_past_2g.py --world-size 3 --n 1100000000

With 3 ranks and 1.1e9 int8 elements per rank, the last rank's slot starts at 2.2e9 (> 2**31) while ``n`` itself
fits an i32: the case 32-bit offset arithmetic gets wrong (an illegal address or data in the wrong place). With
``--n`` at 2**31 or more, ``n`` itself is 64-bit. Heap per rank: about 4 * world_size * n bytes (the outputs, the
pull's input and the push's staging stay allocated); 3 x 1.1e9 int8 takes 13.2 GB per rank, 40 GB on one GPU.
Prints one line per check and exits non-zero if any fails.
"""

import argparse
import sys
import time

import torch

import iris
from iris.ccl import CollectiveConfig

CHUNK = 1 << 27  # elements generated and compared at once: bounded temporaries on a shared GPU


def pattern(rank, start, count, device, salt):
    """int8 values of rank ``rank``'s input at elements [start, start + count): any rank can regenerate them, none
    is zero, and they differ between ranks and along the tensor (a misplaced block shows)."""
    m = (torch.arange(start, start + count, device=device, dtype=torch.int64) * 7 + rank * 31 + salt * 17) % 250
    return (m - 125 + (m >= 125).to(torch.int64)).to(torch.int8)  # [-125, -1] and [1, 125]


def fill(t, rank, salt, offset=0):
    for s in range(0, t.numel(), CHUNK):
        c = min(CHUNK, t.numel() - s)
        t[s:s + c] = pattern(rank, offset + s, c, t.device, salt)


def first_mismatch(got, expect_fn, n_total):
    """The first element index where ``got`` differs from ``expect_fn(start, count)``, or None."""
    for s in range(0, n_total, CHUNK):
        c = min(CHUNK, n_total - s)
        diff = (got[s:s + c] != expect_fn(s, c)).nonzero()
        if diff.numel():
            return s + int(diff[0])
    return None


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def body(n, heap_bytes):
    ctx = iris.iris(heap_bytes)
    rank, world, dev = ctx.get_rank(), ctx.get_num_ranks(), ctx.get_device()
    results = []

    def check(name, got, expect_fn, total):
        synchronize(dev)
        bad = first_mismatch(got, expect_fn, total)
        results.append((name, bad))
        got.fill_(0)

    # all_gather: out[q*n:(q+1)*n] = rank q's input
    inp = torch.empty(n, dtype=torch.int8, device=dev)
    fill(inp, rank, salt=1)
    out = ctx.empty(world * n, dtype=torch.int8)
    out.fill_(-77)
    ctx.barrier()
    start = time.perf_counter()
    ctx.ccl.all_gather(out, inp)
    synchronize(dev)
    took = time.perf_counter() - start
    check(f"all_gather ({took:.2f} s)", out, lambda s, c: torch.cat([
        pattern(q, max(s, q * n) - q * n, min(s + c, (q + 1) * n) - max(s, q * n), dev, 1)
        for q in range(world) if max(s, q * n) < min(s + c, (q + 1) * n)]), world * n)
    del inp

    # all_to_all: slice q of rank r's input -> slice r of rank q's output
    inp = torch.empty(world * n, dtype=torch.int8, device=dev)
    fill(inp, rank, salt=2)
    out.fill_(-77)
    ctx.barrier()
    ctx.ccl.all_to_all(out, inp)

    def a2a_expect(s, c):
        parts = []
        for q in range(world):  # our out's slice q came from rank q's input slice ``rank``
            lo, hi = max(s, q * n), min(s + c, (q + 1) * n)
            if lo < hi:
                parts.append(pattern(q, rank * n + lo - q * n, hi - lo, dev, 2))
        return torch.cat(parts)
    check("all_to_all", out, a2a_expect, world * n)
    del inp

    # reduce_scatter: out = slice ``rank`` of the sum over ranks (int8 wraps, as the kernel's int8 sum does)
    heap_inp = out  # world * n on the heap: the pull reads peers' inputs there
    fill(heap_inp, rank, salt=3)
    mine = torch.empty(n, dtype=torch.int8, device=dev)

    def rs_expect(s, c):
        total = sum(pattern(q, rank * n + s, c, dev, 3).to(torch.int32) for q in range(world))
        return total.to(torch.int8)
    for algorithm in ("pull", "push"):
        mine.fill_(-77)
        ctx.barrier()
        ctx.ccl.reduce_scatter(mine, heap_inp, config=CollectiveConfig(algorithm=algorithm))
        synchronize(dev)
        results.append((f"reduce_scatter {algorithm}", first_mismatch(mine, rs_expect, n)))
    ctx.barrier()
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=3)
    parser.add_argument("--n", type=int, default=1_100_000_000, help="int8 elements per rank (slot size)")
    parser.add_argument("--heap-gib", type=int, default=0, help="heap per rank (default: what the checks need)")
    parser.add_argument("--heap-mib", type=int, default=0, help="heap per rank in MiB (small dry runs)")
    args = parser.parse_args()
    heap = (args.heap_mib << 20) or (args.heap_gib << 30) or (-(-4 * args.world_size * args.n // (1 << 30)) + 1) << 30
    print(f"{args.world_size} ranks, n = {args.n} int8 per rank ({args.world_size * args.n} in each gathered "
          f"output; 2**31 = {1 << 31}), heap {heap / (1 << 30):.2f} GiB per rank", flush=True)
    results = iris.launch(body, args.world_size, args.n, heap, timeout_s=1800)
    failed = False
    for rank, checks in enumerate(results):
        for name, bad in checks:
            failed |= bad is not None
            print(f"rank {rank}: {name}: {'ok' if bad is None else f'FIRST MISMATCH at element {bad}'}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
