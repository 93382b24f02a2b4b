"""One op's device timeline on every rank: which kernels, copies and fills ran, on which stream, and when.

    python benchmarks/timeline.py --out results/2xH200/timeline --op matmul_all_gather --shape 4096x8192x8192
    python benchmarks/timeline.py --out /tmp/tl --op matmul_all_reduce --provider iris_fused_sm --shape 256x64x96

The benchmarks give one number a call; this shows where a fused op's time over its GEMM goes. Each rank runs
the op a few times unprofiled, then ``--calls`` times under ``torch.profiler`` (CUDA activities), each call
started as the harness starts its samples (host barrier, a short sleep kernel, a device barrier:
``iris.bench.harness``), so that the ranks' calls begin together. Written per rank: the Chrome trace
(``timeline_rank<r>.json``, for Perfetto or chrome://tracing) and ``timeline.json``, every call's summary:
its span on the device (its first event to its last), its longest kernel's time, the copies' busy time, the
tail (how long the call went on after that kernel ended) and the copies inside the tail. Printed last: the
median over the calls, for every rank. Providers: ``iris`` (the default config), ``iris_fused``,
``iris_bulk`` and the option variants of ``benchmarks/ops.py`` (``iris_fused_sm``, ``iris_fused_ce``, ...).

Stream memory operations (the copy queue's waits and flag writes) are not traced activities: the wait for a
band shows as the gap before its copy. Where ranks share a GPU, each rank's trace also holds the gaps of the time
slices given to the others, which can split a call in two: read such timelines for order, not for time.
"""

import argparse
import json
import os
import statistics
import time

import torch

import iris
from iris.bench.harness import barrier_then_idle
from iris.bench.suite import default_world_size
from iris.host.distributed import all_gather_object
from iris.ops import OpsConfig
from ops import OPS, local_shapes, option_variants  # benchmarks/ops.py, beside this file

DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")
# the harness's start of a call, not the op's work: torch's sleep kernel (traced by its demangled name,
# "at::cuda::(anonymous namespace)::spin_kernel(long)") and the device barrier
SETUP_KERNELS = ("spin_kernel", "_device_barrier_kernel")
CALL_GAP_US = 1000.0  # calls are run this far apart at least, so a larger gap between events ends a call


def provider_config(provider, op):
    """The ``OpsConfig`` (or None: the default) that ``provider`` names, for ``op``."""
    if provider == "iris":
        return None
    if provider in ("iris_fused", "iris_bulk"):
        return OpsConfig(variant=provider[len("iris_"):])
    variants = option_variants((provider,))
    if provider not in variants or op not in variants[provider][0]:
        raise SystemExit(f"timeline.py: provider {provider!r} does not apply to {op}; use iris, iris_fused, "
                         f"iris_bulk or one of benchmarks/ops.py's option variants")
    return variants[provider][1]


def _union_us(intervals):
    """Total length of the union of (start, end) intervals."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def summarize(trace_events):
    """Per call (events separated by more than CALL_GAP_US of idle device), from a Chrome trace's events: span,
    longest kernel, copy time, tail after that kernel and copy time in the tail, in microseconds; the kernels and
    copies by name with their start (from the call's first event), duration and stream."""
    device = sorted((e for e in trace_events if e.get("ph") == "X" and e.get("cat") in DEVICE_CATEGORIES),
                    key=lambda e: e["ts"])
    calls, current, reach = [], [], float("-inf")
    for event in device:
        if current and event["ts"] - reach > CALL_GAP_US:
            calls.append(current)
            current = []
        current.append(event)
        reach = max(reach, event["ts"] + event["dur"])
    if current:
        calls.append(current)
    summaries = []
    for events in calls:
        work = [e for e in events if not any(k in e["name"] for k in SETUP_KERNELS)]
        if not work:
            continue
        first = min(e["ts"] for e in work)
        last = max(e["ts"] + e["dur"] for e in work)
        kernels = [e for e in work if e["cat"] == "kernel"]
        main = max(kernels, key=lambda e: e["dur"]) if kernels else None
        main_end = main["ts"] + main["dur"] if main else first
        copies = [(e["ts"], e["ts"] + e["dur"]) for e in work if e["cat"] == "gpu_memcpy"]
        summaries.append({
            "span_us": last - first,
            "kernel": main["name"] if main else None,
            "kernel_us": main["dur"] if main else 0.0,
            "copy_us": _union_us(copies),
            "tail_us": last - main_end,
            "tail_copy_us": _union_us([(max(s, main_end), e) for s, e in copies if e > main_end]),
            "events": [{"name": e["name"], "start_us": e["ts"] - first, "us": e["dur"],
                        "stream": e.get("args", {}).get("stream")} for e in work],
        })
    return summaries


def main(out_dir, op, shape, provider, calls, warmup):
    ctx = iris.iris(heap_size=1 << 33 if torch.cuda.is_available() else 1 << 26)
    rank, world, dev = ctx.get_rank(), ctx.get_num_ranks(), ctx.get_device()
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    a_shape, b_shape, out_shape = local_shapes(op, *shape, world)
    a = ctx.randn(*a_shape, dtype=dtype).mul_(0.1)
    b = ctx.randn(*b_shape, dtype=dtype).mul_(0.1)
    out = ctx.empty(*out_shape, dtype=dtype)
    config = provider_config(provider, op)

    def call():
        getattr(ctx.ops, op)(out, a, b, config=config)

    start = barrier_then_idle(ctx)
    for _ in range(warmup):
        start()
        call()
    activities = [torch.profiler.ProfilerActivity.CPU]
    if dev.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
        torch.cuda.synchronize()
    ctx.barrier()
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(calls):
            start()
            call()
            if dev.type == "cuda":
                torch.cuda.synchronize()
            ctx.barrier()
            time.sleep(3 * CALL_GAP_US / 1e6)  # an idle gap on the device between calls
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, f"timeline_rank{rank}.json")
    prof.export_chrome_trace(path)
    with open(path) as f:
        trace = json.load(f)
    mine = summarize(trace.get("traceEvents", trace) if isinstance(trace, dict) else trace)
    everyone = all_gather_object(mine)
    if rank == 0:
        record = {"op": op, "shape": list(shape), "provider": provider, "world_size": world, "device": str(dev),
                  "torch": torch.__version__, "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                  "ranks": everyone}
        with open(os.path.join(out_dir, "timeline.json"), "w") as f:
            json.dump(record, f, indent=1)
        print(table(op, shape, provider, everyone))
    ctx.barrier()
    return mine


def table(op, shape, provider, ranks):
    """Median over the calls of every summary figure, one line a rank."""
    figures = ("span_us", "kernel_us", "copy_us", "tail_us", "tail_copy_us")
    lines = [f"{op} {'x'.join(map(str, shape))} {provider}: median over the calls (us)",
             "rank | calls | " + " | ".join(figures)]
    for r, calls in enumerate(ranks):
        if not calls:
            lines.append(f"{r} | 0 | no device events (cpu backend)")
            continue
        medians = [statistics.median(c[k] for c in calls) for k in figures]
        lines.append(f"{r} | {len(calls)} | " + " | ".join(f"{m:.1f}" for m in medians))
    return "\n".join(lines)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--op", default="matmul_all_gather", choices=OPS)
    parser.add_argument("--shape", default="4096x8192x8192", help="M x N x K, the global problem")
    parser.add_argument("--provider", default="iris")
    parser.add_argument("--calls", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--world-size", type=int, default=None)
    args = parser.parse_args()
    dims = tuple(int(d) for d in args.shape.split("x"))
    if len(dims) != 3:
        parser.error(f"--shape {args.shape!r}: give M x N x K, e.g. 4096x8192x8192")
    iris.run(main, args.world_size or default_world_size(), args.out, args.op, dims, args.provider, args.calls,
             args.warmup)
