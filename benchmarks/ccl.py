"""Collectives side by side, nccl-tests style: iris (``ctx.ccl``; ``iris_push``: reduce_scatter's push algorithm),
NCCL through torch.distributed, and for all_reduce PyTorch symmetric memory
(``torch.ops.symm_mem.one_shot_all_reduce`` / ``two_shot_all_reduce_``).

    python benchmarks/ccl.py --out results/2xH200/ccl            # every GPU, 8 KiB .. 1 GiB, bf16
    python benchmarks/ccl.py --out /tmp/ccl --quick              # tiny sizes on the cpu backend

``bytes`` is the nccl-tests size (all_reduce: the buffer; all_gather: the output; reduce_scatter: the input;
all_to_all: the buffer); busbw follows nccl-tests (all_reduce x 2(W-1)/W, the others x (W-1)/W). Calls
under 0.5 ms are timed as CUDA-graph replays for every provider that captures.
"""

import argparse
import os

import torch
import torch.distributed as dist

import iris
from iris.bench import report
from iris.bench.harness import Point, Sweep, Timing, run_sweep
from iris.bench.suite import default_world_size

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")


def _busbw_factor(op, world):
    return 2 * (world - 1) / world if op == "all_reduce" else (world - 1) / world


def _shapes(op, nbytes, world, itemsize):
    """(inp elements, out elements) for a point of ``nbytes`` (nccl-tests size)."""
    n = nbytes // itemsize
    return {"all_reduce": (n, n), "all_gather": (n // world, n), "reduce_scatter": (n, n // world),
            "all_to_all": (n, n)}[op]


class _SymmMem:
    """torch symmetric-memory buffers (one per size), made lazily; None when this torch cannot."""

    def __init__(self, device):
        self.device = device
        self.buffers = {}
        self.error = None

    def get(self, n, dtype):
        if self.error is None and (n, dtype) not in self.buffers:
            try:
                import torch.distributed._symmetric_memory as symm_mem

                t = symm_mem.empty(n, dtype=dtype, device=self.device)
                symm_mem.rendezvous(t, dist.group.WORLD.group_name)
                self.buffers[(n, dtype)] = t
            except Exception as e:  # pragma: no cover - depends on the torch build
                self.error = f"{type(e).__name__}: {e}"
        return self.buffers.get((n, dtype))


def _variant_config(provider):
    """``iris`` runs the defaults; ``iris_push`` reduce_scatter's push algorithm; ``iris_<programs>x<block>x<warps>``
    (from ``--configs``) overrides the program shape, and ``iris_pull_...`` / ``iris_push_...`` the
    reduce_scatter algorithm with it."""
    if provider == "iris":
        return None
    algorithm, _, shape = provider.removeprefix("iris_").rpartition("_")
    if shape == "push":
        return iris.ccl.CollectiveConfig(algorithm="push")
    programs, block, warps = (int(v) for v in shape.split("x"))
    return iris.ccl.CollectiveConfig(algorithm=algorithm or "auto", comm_sms=programs, block_size=block,
                                     num_warps=warps)


def make_sweep(ctx, sizes, dtype, timing, ops=OPS, configs=()):
    world = ctx.get_num_ranks()
    dev = ctx.get_device()
    itemsize = torch.tensor([], dtype=dtype).element_size()
    symm = _SymmMem(dev) if dev.type == "cuda" else None
    heap = {}

    def heap_pair(op, n_in, n_out):
        if (op, n_in, n_out) not in heap:  # collective: every rank allocates the same, in the same order
            inp = ctx.randn(n_in, dtype=dtype)
            heap[(op, n_in, n_out)] = (inp, ctx.zeros(n_out, dtype=dtype))
        return heap[(op, n_in, n_out)]

    def make(provider, op, bytes):
        n_in, n_out = _shapes(op, bytes, world, itemsize)
        if n_out == 0 or n_in == 0:
            return None
        common = dict(bytes=bytes, dtype=str(dtype).replace("torch.", ""), shape=(n_in,),
                      busbw_factor=_busbw_factor(op, world), variant=provider)
        if provider.startswith(("iris_push", "iris_pull")) and op != "reduce_scatter":
            return None
        if provider.startswith("iris"):
            inp, out = heap_pair(op, n_in, n_out)
            cfg = _variant_config(provider)
            fn = {"all_reduce": lambda: ctx.ccl.all_reduce(out, inp, config=cfg),
                  "all_gather": lambda: ctx.ccl.all_gather(out, inp, config=cfg),
                  "reduce_scatter": lambda: ctx.ccl.reduce_scatter_tensor(out, inp, config=cfg),
                  "all_to_all": lambda: ctx.ccl.all_to_all_single(out, inp, config=cfg)}[op]
            return Point(fns=[fn], **common)
        if provider == "nccl":
            inp = torch.randn(n_in, device=dev).to(dtype)
            out = torch.empty(n_out, dtype=dtype, device=dev)
            fn = {"all_reduce": lambda: dist.all_reduce(inp),
                  "all_gather": lambda: dist.all_gather_into_tensor(out, inp),
                  "reduce_scatter": lambda: dist.reduce_scatter_tensor(out, inp),
                  "all_to_all": lambda: dist.all_to_all_single(out, inp)}[op]
            return Point(fns=[fn], **common)
        if op != "all_reduce" or symm is None:
            return None
        t = symm.get(n_in, dtype)
        if t is None:
            return None
        group_name = dist.group.WORLD.group_name
        if provider == "torch_one_shot":
            return Point(fns=[lambda: torch.ops.symm_mem.one_shot_all_reduce(t, "sum", group_name)], **common)
        return Point(fns=[lambda: torch.ops.symm_mem.two_shot_all_reduce_(t, "sum", group_name)], **common)

    variants = tuple(f"iris_{c}" for c in configs)
    others = ("nccl", "torch_one_shot", "torch_two_shot") if dev.type == "cuda" else ("nccl",)
    providers = ("iris", "iris_push") + variants + others
    return Sweep("ccl", axes={"op": ops, "bytes": sizes}, providers=providers, make=make, timing=timing), symm


def plots(rows, out):
    """Bus bandwidth over size, and latency (us) up to 1 MiB, one panel per collective."""
    report.plot_curves(rows, os.path.join(out, "ccl_busbw.png"), OPS, title="collectives: bus bandwidth")
    small = [dict(r, us_p50=r["ms_p50"] * 1e3) for r in rows if r["bytes"] <= 1 << 20]
    report.plot_curves(small, os.path.join(out, "ccl_latency.png"), OPS, y="us_p50", title="collectives: time per call")


def main(out, quick, max_bytes, min_bytes=0, ops=OPS, configs=(), rounds=1):
    on_cpu = iris.platform.backend.BACKEND == "cpu"
    sizes = [8 << 10, 64 << 10, 256 << 10, 1 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30]
    if quick or on_cpu:
        sizes = [4 << 10, 16 << 10]
    sizes = [s for s in sizes if min_bytes <= s <= max_bytes] or sizes[-1:]
    # every (op, size) keeps its own buffers: at most 7 x the size (all_reduce 2, all_gather and reduce_scatter
    # 1.5 each at 2 ranks, all_to_all 2), summed over the sizes; the push reduce_scatter's staging grows to a
    # power of two at least its input (at most 2 x the largest size; the smaller ones it outgrew stay)
    ctx = iris.iris(heap_size=(7 * sum(sizes) + 4 * max(sizes) + (64 << 20)) if not on_cpu else 1 << 24)
    timing = Timing(warmup=2, repeat=3, min_repeat=2, budget_ms=5) if on_cpu else Timing(rounds=rounds)
    sweep, symm = make_sweep(ctx, sizes, torch.bfloat16 if not on_cpu else torch.float32, timing, ops, configs)
    rows = run_sweep(ctx, sweep)
    if ctx.get_rank() == 0:
        os.makedirs(out, exist_ok=True)
        report.write_results(rows, out, "ccl")
        plots(rows, out)
        if symm is not None and symm.error:
            print(f"[bench] torch symmetric memory unavailable: {symm.error}")
        print(report.format_table(rows, columns=("op", "provider", "bytes", "ms_p50", "busbw_GBps", "timing"),
                                  title="collectives (time per call: us = ms_p50 x 1000)"))
    ctx.barrier()
    return len(rows)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--max-bytes", type=int, default=1 << 30)
    parser.add_argument("--min-bytes", type=int, default=0, help="leave out the sizes below (to re-run the largest)")
    parser.add_argument("--ops", default=",".join(OPS), help="comma-separated subset of " + ",".join(OPS))
    parser.add_argument("--configs", default="", help="extra iris providers, comma-separated [pull_|push_]"
                        "<programs>x<block>x<warps> (e.g. 132x16384x32, push_128x8192x16), each beside the defaults")
    parser.add_argument("--world-size", type=int, default=None)
    parser.add_argument("--rounds", type=int, default=1,
                        help="> 1: the providers of one size take turns, this many rounds (iris.bench.harness)")
    parser.add_argument("--plot-only", metavar="JSON", help="draw the figures from a saved ccl.json into --out")
    args = parser.parse_args()
    if args.plot_only:
        import json

        os.makedirs(args.out, exist_ok=True)
        with open(args.plot_only) as f:
            plots(json.load(f), args.out)
        raise SystemExit(0)
    iris.run(main, args.world_size or default_world_size(), args.out, args.quick, args.max_bytes, args.min_bytes,
             tuple(args.ops.split(",")), tuple(c for c in args.configs.split(",") if c), args.rounds)
