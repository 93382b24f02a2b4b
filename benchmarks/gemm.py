"""The shared GEMM against cuBLAS (``torch.matmul``) on one GPU: every tile configuration in ``CONFIGS`` on the
issue's shapes, whole and as one rank's share of each fused op on 2 ranks.

    python benchmarks/gemm.py --out results/2xH200/gemm              # bf16, the full sweep
    python benchmarks/gemm.py --out /tmp/gemm --quick                # one shape, two configs
    python benchmarks/gemm.py --out /tmp/gemm --default              # every shape, the default config only
    python benchmarks/gemm.py --out /tmp/gemm --default --rounds 5   # the same, five rounds taken in turns

Prints one line per measurement as it goes, then the best configuration per shape as % of cuBLAS (every one with
``--rounds`` > 1), and writes ``gemm.csv``. Times are medians of ``triton.testing.do_bench`` (L2 cleared between
calls), and with ``--rounds`` the median over rounds in which every configuration takes its turn.
"""

import argparse
import csv
import itertools
import os
import statistics

import torch
import triton

from iris.bench.harness import spin_up
from iris.ops import OpsConfig
from iris.ops.gemm import matmul

SHAPES = {  # name: (M, N, K)
    "8192x3584x14336": (8192, 3584, 14336),
    "8192x4608x36864": (8192, 4608, 36864),
    "4096x8192x8192": (4096, 8192, 8192),
    "128x8192x8192": (128, 8192, 8192),
    # one rank's GEMM in each fused op on 2 ranks, for the first paper shape
    "matmul_all_gather/rank": (8192, 1792, 14336),
    "matmul_reduce_scatter/rank": (8192, 3584, 7168),
}
CONFIGS = [OpsConfig(block_m=bm, block_n=bn, block_k=bk, num_stages=s, num_warps=w)
           for (bm, bn, bk), s, w in itertools.product(((128, 256, 64), (128, 128, 64), (256, 128, 64)), (3, 4), (8,))]


def describe(c):
    block_m, block_n, block_k = c.blocks("cuda", torch.bfloat16)
    return f"{block_m}x{block_n}x{block_k} s{c.stages()} w{c.num_warps}"


def main(out, quick, default_only=False, rounds=1):
    torch.manual_seed(0)
    shapes = {"4096x8192x8192": SHAPES["4096x8192x8192"]} if quick else SHAPES
    configs = [OpsConfig()] if default_only else CONFIGS[:2] if quick else CONFIGS
    spin_up(torch.device("cuda"))
    rows = []
    for name, (M, N, K) in shapes.items():
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
        ref = torch.matmul(a, b)
        c = torch.empty_like(ref)
        flop = 2.0 * M * N * K
        calls = {"cublas": lambda: torch.matmul(a, b, out=c)}
        errors = {"cublas": 0.0}
        for config in configs:
            try:
                c.fill_(float("nan"))
                matmul(c, a, b, config)
                errors[describe(config)] = ((c.float() - ref.float()).norm() / ref.float().norm()).item()
                calls[describe(config)] = lambda config=config: matmul(c, a, b, config)
            except Exception as e:  # a tile that does not fit in shared memory is a result, not a crash
                print(f"[gemm] {name} {describe(config)}: {type(e).__name__}: {str(e)[:120]}", flush=True)
        times = {label: [] for label in calls}
        for r in range(rounds):  # every configuration once per round, so drift falls on all alike
            for label, call in calls.items():
                times[label].append(triton.testing.do_bench(call))
                print(f"[gemm] {name} round {r} {label} {times[label][-1]:.4f} ms", flush=True)
        for label, samples in times.items():
            ms = statistics.median(samples)
            rows.append(dict(shape=name, provider="cublas" if label == "cublas" else "iris",
                             config="" if label == "cublas" else label, ms=ms, tflops=flop / ms / 1e9,
                             error=errors[label]))
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "gemm.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"\n{'shape':<28} {'cuBLAS TFLOP/s':>14} {'iris TFLOP/s':>12} {'% of cuBLAS':>11}  config")
    for name in shapes:
        base = next(r for r in rows if r["shape"] == name and r["provider"] == "cublas")
        ours = sorted((r for r in rows if r["shape"] == name and r["provider"] == "iris"), key=lambda r: -r["tflops"])
        for row in ours if rounds > 1 else ours[:1]:  # every configuration when compared over rounds, else the best
            share = 100 * row["tflops"] / base["tflops"]
            print(f"{name:<28} {base['tflops']:>14.0f} {row['tflops']:>12.0f} {share:>10.1f}%  {row['config']}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--default", action="store_true", help="only OpsConfig(), the configuration the ops use")
    parser.add_argument("--rounds", type=int, default=1,
                        help="time every configuration this many times, in turns, and keep the median")
    args = parser.parse_args()
    main(args.out, args.quick, args.default, args.rounds)
