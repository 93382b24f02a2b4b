"""Make and drop many large contexts, as upstream Iris's compile tests do, and watch the GPU's free memory.

    python scripts/compat_dropped_contexts.py [--world-size 2] [--count 20] [--heap-mib 8192]

Each round: ``ctx = iris.iris(heap)``, the collectives through ``ctx.ccl`` and ``torch.ops.iris`` under
``torch.compile`` (inductor), then ``ctx.barrier(); del ctx; gc.collect()``. With ranks sharing one H200 (141 GB),
two 8 GiB heaps a round leak past the GPU's memory by the eighth round if dropped contexts keep their heaps.
Prints one line per round (free GiB on rank 0, seconds so far) and ``dropped contexts: PASS`` when the free memory after the last
round is within 2 GiB of the first round's.
"""

import argparse
import gc
import time

import torch

import iris


def rounds(count, heap_bytes):
    import iris.compile

    free = []
    start = time.perf_counter()
    for i in range(count):
        ctx = iris.iris(heap_bytes)
        iris.compile.set_context(ctx)
        rank, world = ctx.get_rank(), ctx.get_num_ranks()
        x = ctx.zeros(1024, 256 * world, dtype=torch.bfloat16)
        x.fill_(rank + 1)
        out = ctx.zeros_like(x)
        ctx.ccl.all_reduce(out, x)
        ctx.ccl.all_to_all(out, x)
        ctx.ccl.reduce_scatter(out, x)
        step = torch.compile(lambda t: torch.ops.iris.all_reduce(t) * 2, backend="inductor")
        got = step(x)
        expect = 2.0 * sum(range(1, world + 1))
        assert bool((got == expect).all()), f"round {i}: compiled all_reduce gave {got.flatten()[:4]}"
        ctx.barrier()
        del ctx, x, out, got
        gc.collect()
        if torch.cuda.is_available():  # the cpu backend runs the same rounds, for a smoke test
            torch.cuda.synchronize()
        free.append((torch.cuda.mem_get_info()[0] / 2**30 if torch.cuda.is_available() else 0.0,
                     time.perf_counter() - start))
    return free


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--count", type=int, default=20)
    parser.add_argument("--heap-mib", type=int, default=8192)
    args = parser.parse_args()
    free = iris.run(rounds, args.world_size, args.count, args.heap_mib << 20)[0]
    for i, (gib, seconds) in enumerate(free):
        print(f"round {i:2d}: {gib:7.1f} GiB free, {seconds:6.1f} s since the first round began")
    free = [gib for gib, _ in free]
    ok = free[-1] >= free[0] - 2
    print(f"dropped contexts: {'PASS' if ok else 'FAIL'} ({args.count} x {args.world_size} heaps of {args.heap_mib} MiB;"
          f" free {free[0]:.1f} -> {free[-1]:.1f} GiB)")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
