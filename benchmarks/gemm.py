"""The shared GEMM against cuBLAS (``torch.matmul``) on one GPU: every tile configuration in ``CONFIGS`` on the
issue's shapes, whole and as one rank's share of each fused op on 2 ranks.

    python benchmarks/gemm.py --out results/2xH200/gemm              # bf16, the full sweep
    python benchmarks/gemm.py --out /tmp/gemm --quick                # one shape, two configs
    python benchmarks/gemm.py --out /tmp/gemm --default              # every shape, the default config only

Prints one line per measurement as it goes, then the best configuration per shape as % of cuBLAS, and writes
``gemm.csv``. Times are medians of ``triton.testing.do_bench`` (L2 cleared between calls).
"""

import argparse
import csv
import itertools
import os

import torch
import triton

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
CONFIGS = [OpsConfig(block_m=bm, block_n=bn, block_k=bk, num_stages=s, num_warps=w, flatten=f)
           for (bm, bn, bk), s, w, f in itertools.product(((128, 256, 64), (128, 128, 64), (256, 128, 64)), (3, 4),
                                                         (8,), (False, True))]


def describe(c):
    flat = " flat" if c.flatten else ""
    return f"{c.block_m}x{c.block_n}x{c.block_k} s{c.stages()} w{c.num_warps}{flat}"


def main(out, quick, default_only=False):
    torch.manual_seed(0)
    shapes = {"4096x8192x8192": SHAPES["4096x8192x8192"]} if quick else SHAPES
    configs = [OpsConfig()] if default_only else CONFIGS[:2] if quick else CONFIGS
    rows = []
    for name, (M, N, K) in shapes.items():
        a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
        ref = torch.matmul(a, b)
        c = torch.empty_like(ref)
        flop = 2.0 * M * N * K
        ms = triton.testing.do_bench(lambda: torch.matmul(a, b, out=c))
        rows.append(dict(shape=name, provider="cublas", config="", ms=ms, tflops=flop / ms / 1e9, error=0.0))
        print(f"[gemm] {name} cublas {ms:.4f} ms {flop / ms / 1e9:.0f} TFLOP/s", flush=True)
        for config in configs:
            try:
                c.fill_(float("nan"))
                matmul(c, a, b, config)
                error = ((c.float() - ref.float()).norm() / ref.float().norm()).item()
                ms = triton.testing.do_bench(lambda: matmul(c, a, b, config))
            except Exception as e:  # a tile that does not fit in shared memory is a result, not a crash
                print(f"[gemm] {name} {describe(config)}: {type(e).__name__}: {str(e)[:120]}", flush=True)
                continue
            rows.append(dict(shape=name, provider="iris", config=describe(config), ms=ms, tflops=flop / ms / 1e9,
                             error=error))
            print(f"[gemm] {name} iris {describe(config)} {ms:.4f} ms {flop / ms / 1e9:.0f} TFLOP/s "
                  f"(rel. error {error:.1e})", flush=True)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "gemm.csv"), "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    print(f"\n{'shape':<28} {'cuBLAS TFLOP/s':>14} {'iris TFLOP/s':>12} {'% of cuBLAS':>11}  best config")
    for name in shapes:
        base = next(r for r in rows if r["shape"] == name and r["provider"] == "cublas")
        ours = [r for r in rows if r["shape"] == name and r["provider"] == "iris"]
        if ours:
            best = max(ours, key=lambda r: r["tflops"])
            share = 100 * best["tflops"] / base["tflops"]
            print(f"{name:<28} {base['tflops']:>14.0f} {best['tflops']:>12.0f} {share:>10.1f}%  {best['config']}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--default", action="store_true", help="only OpsConfig(), the configuration the ops use")
    args = parser.parse_args()
    main(args.out, args.quick, args.default)
