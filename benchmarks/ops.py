"""Fused GEMM + communication side by side: iris (fused and bulk), cuBLAS + NCCL, PyTorch's fused
symmetric-memory ops where they exist, and each half alone (the speed of light is the larger of the two).

    python benchmarks/ops.py --out results/2xH200/ops                    # the issue's shapes, bf16
    python benchmarks/ops.py --out /tmp/ops --quick                      # tiny shapes (cpu backend)

Shapes are the global problem M x N x K; each rank holds its share as docs/design.md section 5 says. Providers:
``iris_fused`` / ``iris_bulk`` (``ctx.ops`` with that variant; ``iris_fused_ce`` and ``iris_fused_sm``: every
fused op's with and without ``copy_engine``; ``iris_fused_<BM>x<BN>x<BK>``: every fused op at those tiles; ``iris_fused_g<G>``: with ``group_m=G``;
``iris_fused_s<S>``: with ``num_stages=S``),
``torch_bulk`` (``torch.matmul`` then the NCCL collective), ``torch_fused``
(``torch.ops.symm_mem.fused_all_gather_matmul`` / ``fused_matmul_reduce_scatter``), ``gemm_only`` and
``comm_only`` (cuBLAS alone, NCCL alone), and ``iris_gemm`` (the shared mainloop alone).
"""

import argparse
import json
import os
import re

import torch
import torch.distributed as dist

import iris
from iris.bench import report
from iris.bench.harness import Point, Sweep, Timing, run_sweep, spin_up
from iris.bench.suite import default_world_size
from iris.ops import OpsConfig
from iris.ops.gemm import matmul

OPS = ("matmul_all_gather", "all_gather_matmul", "matmul_reduce_scatter", "matmul_all_reduce")
SHAPES = ((8192, 3584, 14336), (8192, 4608, 36864), (4096, 8192, 8192), (128, 8192, 8192))
PROVIDERS = ("iris", "iris_fused", "iris_fused_ce", "iris_fused_sm", "iris_bulk", "torch_bulk", "torch_fused", "gemm_only", "comm_only",
             "iris_gemm")


def option_variants(providers=()):
    """Fused kernels with one option changed, and the ops they apply to: every fused op with and without the copy
    engines, at the tiles each ``iris_fused_<BM>x<BN>x<BK>`` in ``providers`` names, with the ``group_m`` each
    ``iris_fused_g<G>`` names and with the stages each ``iris_fused_s<S>`` names."""
    every_op = ("matmul_all_gather", "matmul_reduce_scatter", "matmul_all_reduce", "all_gather_matmul")
    blocks = {p: re.fullmatch(r"iris_fused_(\d+)x(\d+)x(\d+)", p) for p in providers}
    tiles = {p: (every_op, OpsConfig(variant="fused", block_m=int(m[1]), block_n=int(m[2]), block_k=int(m[3])))
             for p, m in blocks.items() if m}
    groups = {p: (every_op, OpsConfig(variant="fused", group_m=int(p[len("iris_fused_g"):])))
              for p in providers if re.fullmatch(r"iris_fused_g\d+", p)}
    stages = {p: (every_op, OpsConfig(variant="fused", num_stages=int(p[len("iris_fused_s"):])))
              for p in providers if re.fullmatch(r"iris_fused_s\d+", p)}
    return {**tiles, **groups, **stages,
            "iris_fused_ce": (every_op, OpsConfig(variant="fused", copy_engine=True)),
            "iris_fused_sm": (every_op, OpsConfig(variant="fused", copy_engine=False))}


def local_shapes(op, M, N, K, world):
    """(A, B, out) shapes on one rank."""
    return {
        "matmul_all_gather": ((M, K), (K, N // world), (M, N)),
        "all_gather_matmul": ((M // world, K), (K, N), (M, N)),
        "matmul_reduce_scatter": ((M, K // world), (K // world, N), (M // world, N)),
        "matmul_all_reduce": ((M, K // world), (K // world, N), (M, N)),
    }[op]


def make_sweep(ctx, shapes, dtype, timing, ops=OPS, providers=PROVIDERS):
    world = ctx.get_num_ranks()
    dev = ctx.get_device()
    group_name = dist.group.WORLD.group_name
    torch_fused = False
    if dev.type == "cuda":
        try:  # PyTorch's fused ops need symmetric memory enabled for the group
            from torch.distributed._symmetric_memory import enable_symm_mem_for_group

            enable_symm_mem_for_group(group_name)
            torch_fused = True
        except Exception as e:  # depends on the torch build
            print(f"[bench] torch fused ops unavailable: {type(e).__name__}: {e}")
    cache = {}
    variants = option_variants(providers)

    def operands(op, shape):
        key = (op, shape)
        if key not in cache:  # collective allocation: every rank builds the same, in the same order
            (a_shape, b_shape, out_shape) = local_shapes(op, *shape, world)
            a = ctx.randn(*a_shape, dtype=dtype).mul_(0.1)  # in place: A must stay on the heap
            b = ctx.randn(*b_shape, dtype=dtype).mul_(0.1)
            out = ctx.empty(*out_shape, dtype=dtype)
            cache[key] = (a, b, out)
        return cache[key]

    def comm(op, a, b, local, a_full):
        """The collective the op needs, on NCCL, over buffers of the right size (all_gather_matmul's gathers A
        into ``a_full``, which the GEMM then reads)."""
        if op == "matmul_all_gather":
            gathered = torch.empty(world * local.numel(), dtype=dtype, device=dev)
            return lambda: dist.all_gather_into_tensor(gathered, local.reshape(-1))
        if op == "all_gather_matmul":
            return lambda: dist.all_gather_into_tensor(a_full, a)
        if op == "matmul_reduce_scatter":
            shard = torch.empty(local.shape[0] // world, local.shape[1], dtype=dtype, device=dev)
            return lambda: dist.reduce_scatter_tensor(shard, local)
        return lambda: dist.all_reduce(local)

    def make(provider, op, shape):
        M, N, K = shape
        a, b, out = operands(op, shape)
        flops = 2.0 * M * N * K / world  # per rank
        common = dict(bytes=out.numel() * out.element_size(), dtype=str(dtype).replace("torch.", ""), shape=shape,
                      flops=flops, variant=provider)
        gathered_a = op == "all_gather_matmul"
        if provider in variants:
            ops_of, config = variants[provider]
            if op not in ops_of:
                return None
            provider = "iris_fused"
        elif provider.startswith("iris") and provider != "iris_gemm":
            config = OpsConfig(variant=provider.partition("_")[2] or "auto")  # "iris": what a user gets
        if provider.startswith("iris") and provider != "iris_gemm":
            fn = getattr(ctx.ops, op)
            try:
                fn(out, a, b, config=config)  # the same shape check on every rank, so all skip alike
            except ValueError as e:
                if ctx.get_rank() == 0:
                    print(f"[bench] {op} {shape} {provider}: skipped ({e})")
                return None
            return Point(fns=[lambda: fn(out, a, b, config=config)], **common)
        if provider == "torch_fused" and not torch_fused:
            return None
        # this rank's GEMM: C_r [M, N / W] for matmul_all_gather, the full [M, N] (partial or gathered) otherwise
        local_c = torch.empty(M, b.shape[1], dtype=dtype, device=dev)
        # all_gather_matmul's gathered A, drawn like the operands: a GEMM over the zeros of a fresh allocation ran
        # 12% faster on an H200 than over random values (docs/perf-notes.md, "A GEMM over zeros")
        a_full = torch.randn(M, K, dtype=dtype, device=dev).mul_(0.1) if gathered_a else a
        if provider == "iris_gemm":
            return Point(fns=[lambda: matmul(local_c, a_full, b, OpsConfig())], **common)
        if provider == "gemm_only":
            return Point(fns=[lambda: torch.matmul(a_full, b, out=local_c)], **common)
        collective = comm(op, a, b, local_c, a_full)
        if provider == "comm_only":
            return Point(fns=[collective], **common)
        if provider == "torch_bulk":
            if gathered_a:
                return Point(fns=[lambda: (collective(), torch.matmul(a_full, b, out=local_c))], **common)
            return Point(fns=[lambda: (torch.matmul(a, b, out=local_c), collective())], **common)
        if op == "all_gather_matmul":  # torch_fused
            return Point(fns=[lambda: torch.ops.symm_mem.fused_all_gather_matmul(a, [b], 0, group_name)], **common)
        if op == "matmul_reduce_scatter":
            return Point(fns=[lambda: torch.ops.symm_mem.fused_matmul_reduce_scatter(a, b, "sum", 0, group_name)],
                         **common)
        return None

    return Sweep("ops", axes={"op": ops, "shape": shapes}, providers=providers, make=make, timing=timing)


def plots(rows, out):
    """The paper's two figures, per op and shape: speedup over cuBLAS + NCCL (``torch_bulk``) of each provider
    and of the speed of light max(GEMM alone, communication alone); and the breakdown: GEMM alone,
    communication alone, and iris, as fractions of GEMM + communication run back to back."""
    ms = {(r["op"], r["shape"], r["provider"]): r["ms_p50"] for r in rows}
    speedup, breakdown = {}, {}
    for op, shape in dict.fromkeys((r["op"], r["shape"]) for r in rows):
        got = {p: ms[(op, shape, p)] for p in PROVIDERS if (op, shape, p) in ms}
        if not {"torch_bulk", "gemm_only", "comm_only"} <= got.keys():
            continue
        bars = {p: got["torch_bulk"] / got[p] for p in ("iris", "iris_fused", "iris_bulk", "torch_fused") if p in got}
        bars["speed of light"] = got["torch_bulk"] / max(got["gemm_only"], got["comm_only"])
        speedup.setdefault(op, {})[shape] = bars
        serial = got["gemm_only"] + got["comm_only"]
        breakdown.setdefault(op, {})[shape] = {"GEMM alone": got["gemm_only"] / serial,
                                               "communication alone": got["comm_only"] / serial,
                                               **({"iris": got["iris"] / serial} if "iris" in got else {})}
    report.plot_bars(speedup, os.path.join(out, "ops_speedup.png"), "speedup over cuBLAS + NCCL",
                     title="fused GEMM + communication: speedup", reference=1.0)
    report.plot_bars(breakdown, os.path.join(out, "ops_breakdown.png"), "time / (GEMM + communication)",
                     title="fused GEMM + communication: where the time goes", reference=1.0)


def main(out, quick, ops=OPS, shapes=SHAPES, providers=PROVIDERS, rounds=3):
    on_cpu = iris.platform.backend.BACKEND == "cpu"
    shapes = ((64, 64, 96),) if quick or on_cpu else shapes
    ctx = iris.iris(heap_size=(1 << 22) if on_cpu else (24 << 30))
    timing = Timing(warmup=1, repeat=2, min_repeat=1, budget_ms=5) if on_cpu else Timing(repeat=10, rounds=rounds)
    dtype = torch.float32 if on_cpu else torch.bfloat16
    if not on_cpu:
        spin_up(ctx.get_device())
    rows = run_sweep(ctx, make_sweep(ctx, shapes, dtype, timing, ops, providers))
    if ctx.get_rank() == 0:
        os.makedirs(out, exist_ok=True)
        report.write_results(rows, out, "ops")
        plots(rows, out)
        print(report.format_table(rows, columns=("op", "provider", "shape", "ms_p50", "tflops", "timing"),
                                  title="fused GEMM + communication"))
    ctx.barrier()
    return len(rows)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--world-size", type=int, default=None)
    parser.add_argument("--ops", default=",".join(OPS), help="comma-separated subset of " + ",".join(OPS))
    parser.add_argument("--shapes", default=",".join("x".join(map(str, s)) for s in SHAPES),
                        help="comma-separated MxNxK")
    parser.add_argument("--providers", default=",".join(PROVIDERS), help="comma-separated subset")
    parser.add_argument("--rounds", type=int, default=3,
                        help="the providers of one shape take turns, this many rounds (iris.bench.harness)")
    parser.add_argument("--plot-only", metavar="JSON", help="draw the figures from a saved ops.json into --out")
    args = parser.parse_args()
    if args.plot_only:
        os.makedirs(args.out, exist_ok=True)
        with open(args.plot_only) as f:
            plots(json.load(f), args.out)
        raise SystemExit(0)
    iris.run(main, args.world_size or default_world_size(), args.out, args.quick, tuple(args.ops.split(",")),
             tuple(tuple(int(d) for d in s.split("x")) for s in args.shapes.split(",")),
             tuple(args.providers.split(",")), args.rounds)
