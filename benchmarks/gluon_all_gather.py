"""Triton, Gluon register stores and Gluon TMA (bulk tensor stores) for the same all_gather: bandwidth by program
count, and the programs (SMs) each needs to reach 90% of the device's copy ceiling (torch's device-to-device copy
of the same bytes).

    python benchmarks/gluon_all_gather.py [--world-size 1] [--mib 256] [--json out.json]

With ``IRIS_BACKEND=simulation`` and ``--world-size 2`` the two ranks share one GPU: every byte an all_gather moves
is then a copy within that GPU's memory, so the ceiling is the same copy. Each call's output is checked against
the torch reference (poisoned first) before it is timed. Prints one row per provider and program count, then each
provider's best and SMs-to-90%; ``--json`` writes the rows.
"""

import argparse
import json
import os

import torch

import iris
from iris.ccl import CollectiveConfig

PROGRAMS = tuple(int(p) for p in os.environ.get("GLUON_BENCH_PROGRAMS", "1,2,4,8,16,32,64,96,132").split(","))
# provider -> (config fields, what the shape is). The register paths take the collectives' latency-bound shape
# (4096 elements, 8 warps: 16 bytes a thread per step); the TMA path moves 32 KiB tiles (64 x 256 bf16) through 3
# shared buffers, and its threads only load, so 4 warps hold a tile's loads in flight (16 x 16 bytes a thread).
PROVIDERS = {
    "triton": dict(block_size=4096, num_warps=8),
    "gluon": dict(block_size=4096, num_warps=8, use_gluon=True),
    "gluon_tma": dict(block_size=16384, num_warps=4, use_gluon=True, gluon_path="tma"),
}


def _time_ms(ctx, fn):
    ms = iris.do_bench(fn, barrier_fn=ctx.barrier, n_warmup=3, n_repeat=10, return_mode="median")
    return max(ctx.broadcast(ms, src=r) for r in range(ctx.get_num_ranks()))  # the slowest rank


def main(mib, providers):
    ctx = iris.iris(heap_size=3 * int(mib * (1 << 20)) + (64 << 20))
    world = ctx.get_num_ranks()
    n = int(mib * (1 << 20)) // 2 // world // 128 * 128  # bf16 elements each rank contributes: out is about mib MiB
    pattern = lambda r: ((torch.arange(n, device=ctx.get_device()) % 127) + 3 * r + 1).to(torch.bfloat16)  # exact
    inp = ctx.empty(n, dtype=torch.bfloat16)
    inp.copy_(pattern(ctx.get_rank()))
    out = ctx.zeros(world * n, dtype=torch.bfloat16)
    ref = torch.cat([pattern(r) for r in range(world)])
    moved = world * n * 2  # bytes each rank writes (its slot into every member's out, its own included)
    src, dst = torch.empty(moved, dtype=torch.uint8, device=ctx.get_device()), torch.empty(
        moved, dtype=torch.uint8, device=ctx.get_device())
    ceiling = moved / _time_ms(ctx, lambda: dst.copy_(src)) / 1e6  # GB/s: write bytes per copy
    rows = []
    for provider in providers:
        for programs in PROGRAMS:
            cfg = CollectiveConfig(comm_sms=programs, **PROVIDERS[provider])
            out.fill_(-1)
            ctx.barrier()
            ctx.ccl.all_gather(out, inp, config=cfg)
            ctx.barrier()
            correct = bool(torch.equal(out, ref))
            ms = _time_ms(ctx, lambda: ctx.ccl.all_gather(out, inp, config=cfg))
            rows.append({"op": "all_gather", "provider": provider, "programs": programs, "world_size": world,
                         "dtype": "bf16", "bytes": moved, "ms": ms, "GBps": moved / ms / 1e6,
                         "ceiling_GBps": ceiling, "correct": correct, "shape": PROVIDERS[provider]})
    return rows


def sms_to_90(rows):
    """The fewest programs whose bandwidth reaches 90% of the copy ceiling, or None."""
    at90 = [r["programs"] for r in rows if r["GBps"] >= 0.9 * r["ceiling_GBps"]]
    return min(at90) if at90 else None


def report(rows):
    for r in rows:
        print(f"{r['provider']:9s} ws={r['world_size']} programs={r['programs']:4d} {r['GBps']:8.1f} GB/s "
              f"({100 * r['GBps'] / r['ceiling_GBps']:5.1f}% of copy {r['ceiling_GBps']:.0f}) ok={r['correct']}")
    for provider in dict.fromkeys(r["provider"] for r in rows):
        mine = [r for r in rows if r["provider"] == provider]
        best = max(mine, key=lambda r: r["GBps"])
        at90 = sms_to_90(mine)
        print(f"SUMMARY {provider:9s} ws={best['world_size']} best {best['GBps']:.1f} GB/s at {best['programs']} "
              f"programs ({100 * best['GBps'] / best['ceiling_GBps']:.0f}% of copy), SMs to 90% of copy: "
              f"{at90 if at90 else 'not reached'}, all correct: {all(r['correct'] for r in mine)}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=1)
    parser.add_argument("--mib", type=float, default=256)
    parser.add_argument("--providers", default=",".join(PROVIDERS))
    parser.add_argument("--json")
    args = parser.parse_args()
    rows = iris.run(main, args.world_size, args.mib, args.providers.split(","))[0]
    report(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
