"""Gluon against Triton for the same all_gather: bandwidth by program count, and the programs (SMs) each needs to
reach 90% of the device's copy ceiling (torch's device-to-device copy of the same bytes).

    python benchmarks/gluon_all_gather.py [--world-size 1] [--mib 256] [--json out.json]

With ``IRIS_BACKEND=simulation`` and ``--world-size 2`` the two ranks share one GPU: every byte an all_gather moves
is then a copy within that GPU's memory, so the ceiling is the same copy. Prints one row per provider and program
count, then the SMs-to-90% of each; ``--json`` writes the rows.
"""

import argparse
import json
import os

import torch

import iris
from iris.ccl import CollectiveConfig

PROGRAMS = tuple(int(p) for p in os.environ.get("GLUON_BENCH_PROGRAMS", "1,2,4,8,16,32,48,64,96,128,132").split(","))


def _time_ms(ctx, fn):
    ms = iris.do_bench(fn, barrier_fn=ctx.barrier, n_warmup=3, n_repeat=10, return_mode="median")
    return max(ctx.broadcast(ms, src=r) for r in range(ctx.get_num_ranks()))  # the slowest rank


def main(mib):
    ctx = iris.iris(heap_size=3 * (mib << 20) + (64 << 20))
    world = ctx.get_num_ranks()
    n = (mib << 20) // 2 // world  # bf16 elements each rank contributes: out is mib MiB
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
    for gluon in (False, True):
        for programs in PROGRAMS:
            cfg = CollectiveConfig(comm_sms=programs, block_size=4096, num_warps=8, use_gluon=gluon)
            out.fill_(-1)
            ctx.ccl.all_gather(out, inp, config=cfg)
            ctx.barrier()
            correct = torch.equal(out, ref)
            ms = _time_ms(ctx, lambda: ctx.ccl.all_gather(out, inp, config=cfg))
            rows.append({"provider": "gluon" if gluon else "triton", "programs": programs, "world_size": world,
                         "bytes": moved, "ms": ms, "GBps": moved / ms / 1e6, "ceiling_GBps": ceiling,
                         "correct": correct})
    return rows


def report(rows):
    for r in rows:
        print(f"{r['provider']:7s} ws={r['world_size']} programs={r['programs']:4d} {r['GBps']:8.1f} GB/s "
              f"({100 * r['GBps'] / r['ceiling_GBps']:5.1f}% of copy {r['ceiling_GBps']:.0f}) ok={r['correct']}")
    for provider in ("triton", "gluon"):
        mine = [r for r in rows if r["provider"] == provider]
        at90 = [r["programs"] for r in mine if r["GBps"] >= 0.9 * r["ceiling_GBps"]]
        best = max(r["GBps"] for r in mine)
        print(f"SUMMARY {provider:7s} ws={mine[0]['world_size']} best {best:.1f} GB/s, SMs to 90% of copy: "
              f"{min(at90) if at90 else 'not reached'}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=1)
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--json")
    args = parser.parse_args()
    rows = iris.run(main, args.world_size, args.mib)[0]
    report(rows)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
