"""The tensor-parallel Llama-style decoder end to end, each communication provider side by side in one run:
decode step latency (CUDA-graph replay, one new token per sequence over a KV cache) and prefill throughput.

    python benchmarks/tp_model.py --out results/2xH200/tp_model                      # Llama-3-8B shapes, 8 layers
    python benchmarks/tp_model.py --out /tmp/tp --layers 2 --batches 1,8 --prefill-tokens 2048

Providers (``iris/models/comm.py``): ``nccl`` (torch.distributed all-reduce; gloo where ranks share a GPU, then
eager, since gloo is not graph-capturable), ``symm_mem`` (torch symmetric memory: one-shot all-reduce for
decode, fused all-gather-matmul / matmul-reduce-scatter for prefill), ``iris`` (``ccl.all_reduce_rmsnorm`` for
decode, ``ops.all_gather_matmul`` / ``ops.matmul_reduce_scatter`` for prefill), ``iris_unfused`` (decode with
``ccl.all_reduce`` then torch's add and RMSNorm), and ``none``: the same step with every communication left out
(wrong numbers, the compute alone). ``comm_share`` = 1 - none / provider: the part of a step that communication
adds. ``speedup`` is against ``nccl``. Times are the max over ranks of each rank's median.
"""

import argparse
import json
import os

import torch
import torch.distributed as dist

import iris
from iris.bench import report
from iris.models import IrisComm, LlamaConfig, NoComm, SymmMemComm, TensorParallelLlama, TorchDistComm

PROVIDERS = ("nccl", "symm_mem", "iris", "iris_unfused", "none")
SEED = 1234


def make_comm(name, ctx):
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    if name == "nccl":
        return TorchDistComm()
    if name == "symm_mem":
        return SymmMemComm(device=ctx.get_device())
    if name == "iris":
        return IrisComm(ctx)
    if name == "iris_unfused":
        return IrisComm(ctx, fused_norm=False)
    if name == "none":
        return NoComm(rank, world)
    raise ValueError(f"tp_model: unknown provider {name!r}; use some of {', '.join(PROVIDERS)}")


def time_ms(ctx, fn, warmup, reps):
    """This rank's median ms per call (CUDA events; host clock on the cpu backend), after ``warmup`` calls."""
    for _ in range(warmup):
        fn()
    on_gpu = ctx.get_device().type == "cuda"
    if on_gpu:
        torch.cuda.synchronize()
    ctx.barrier()
    times = []
    for _ in range(reps):
        if on_gpu:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            times.append((start, end))
        else:
            import time

            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    if on_gpu:
        torch.cuda.synchronize()
        times = [s.elapsed_time(e) for s, e in times]
    else:
        times = [t * 1e3 for t in times]
    return sorted(times)[len(times) // 2]


def slowest(ms):
    everyone = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, ms)
    return max(everyone)


def decode_ms(ctx, model, batch, context, reps):
    """One decode step for ``batch`` sequences at position ``context``, replayed from a CUDA graph where the
    provider can be captured; returns (ms, how it was timed)."""
    dev = ctx.get_device()
    cache = model.new_cache(batch, context + 1)
    cache.fill_random(context, SEED)
    x = torch.randn(batch, 1, model.config.hidden, generator=torch.Generator().manual_seed(SEED)).to(model.dtype)
    x = x.to(dev)

    def step():
        model.forward(x, cache, context)

    if dev.type == "cuda" and model.comm.graph_capturable:
        step()  # buffers, sync state and kernels before capture
        torch.cuda.synchronize()
        ctx.barrier()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            step()
        torch.cuda.synchronize()
        ctx.barrier()
        return time_ms(ctx, graph.replay, 5, reps), "graph"
    return time_ms(ctx, step, 2, reps), "eager"


def prefill_ms(ctx, model, tokens, reps):
    x = torch.randn(1, tokens, model.config.hidden, generator=torch.Generator().manual_seed(SEED)).to(model.dtype)
    x = x.to(ctx.get_device())
    return time_ms(ctx, lambda: model.forward(x), 1, reps), "eager"


def run(ctx, args):
    dev, world = ctx.get_device(), ctx.get_num_ranks()
    positions = max(args.prefill_tokens + [args.context + 1])
    config = (LlamaConfig.toy(args.layers, positions) if args.toy
              else LlamaConfig(layers=args.layers, max_positions=positions))
    env = report.environment(dev)
    rows = []
    for name in args.providers:
        try:
            comm = make_comm(name, ctx)
            model = TensorParallelLlama(config, comm, torch.bfloat16 if dev.type == "cuda" else torch.float32, dev,
                                        seed=SEED)
        except (RuntimeError, ValueError) as e:  # a provider this torch or device lacks
            if ctx.get_rank() == 0:
                print(f"[tp_model] {name}: unavailable: {e}", flush=True)
            continue
        points = [("decode", b) for b in args.batches]
        if name != "iris_unfused":  # its prefill is iris's
            points += [("prefill", t) for t in args.prefill_tokens]
        for op, size in points:
            try:
                if op == "decode":
                    ms, how = decode_ms(ctx, model, size, args.context, args.reps)
                else:
                    ms, how = prefill_ms(ctx, model, size, max(3, args.reps // 20))
            except Exception as e:  # noqa: BLE001 - reported, and the other points still run
                if ctx.get_rank() == 0:
                    print(f"[tp_model] {name} {op} {size}: failed: {type(e).__name__}: {e}", flush=True)
                continue
            ms = slowest(ms)
            if how == "eager" and op == "decode" and dev.type == "cuda":
                how += f" ({dist.get_backend()})"
            shape = f"batch {size} x 1 token, context {args.context}" if op == "decode" else f"{size} tokens"
            tokens = size
            rows.append(dict(op=op, provider=name, variant=how, world_size=world, dtype=str(model.dtype), shape=shape,
                             size=size, bytes=None, ms_p50=ms, ms_p20=None, ms_p80=None, timing=how,
                             tokens_per_s=tokens / ms * 1e3, gpu=env["gpu"], commit=env["commit"], date=env["date"]))
            if ctx.get_rank() == 0:
                print(f"[tp_model] {name:13s} {op:8s} {size:6d}: {ms:9.3f} ms ({how})", flush=True)
        del model, comm
        if dev.type == "cuda":
            torch.cuda.empty_cache()
        _derive(rows)
        if ctx.get_rank() == 0:  # after every provider, so a run stopped later keeps what it measured
            _write(rows, args, config, world, env)
    ctx.barrier()


def _derive(rows):
    """comm_share against ``none`` and speedup against ``nccl`` at the same op and size."""
    by = {(r["provider"], r["op"], r["size"]): r["ms_p50"] for r in rows}
    for r in rows:
        none, nccl = by.get(("none", r["op"], r["size"])), by.get(("nccl", r["op"], r["size"]))
        r["comm_share"] = None if none is None or r["provider"] == "none" else max(0.0, 1 - none / r["ms_p50"])
        r["speedup"] = None if nccl is None else nccl / r["ms_p50"]


def _write(rows, args, config, world, env):
    columns = ("op", "shape", "provider", "ms_p50", "tokens_per_s", "comm_share", "speedup", "timing")
    title = (f"tensor-parallel decoder, {config.layers} layers, hidden {config.hidden}, MLP {config.intermediate}, "
             f"{config.heads}/{config.kv_heads} heads, {world} ranks, {env['gpu']}, {env['commit']}")
    print(report.format_table(rows, columns=columns, title=title), flush=True)
    if not args.out:
        return
    os.makedirs(args.out, exist_ok=True)
    report.write_csv(rows, os.path.join(args.out, "tp_model.csv"))
    with open(os.path.join(args.out, "tp_model.json"), "w") as f:
        json.dump({"environment": env, "config": vars(config), "args": vars(args), "rows": rows}, f, indent=1)
    panels = {}
    for op, unit in (("decode", "ms per step"), ("prefill", "ms per pass")):
        groups = {}
        for r in rows:
            if r["op"] == op:
                groups.setdefault(f"{'batch ' if op == 'decode' else ''}{r['size']}", {})[r["provider"]] = r["ms_p50"]
        panels[f"{op} ({unit}, lower is better)"] = groups
    report.plot_bars(panels, os.path.join(args.out, "tp_model.png"), "ms", title=title)


def main(args):
    ctx = iris.iris(heap_size=args.heap_gib << 30)
    run(ctx, args)


def _ints(text):
    return [int(v) for v in text.split(",") if v]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=None, help="folder for tp_model.{csv,json,png}")
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--batches", type=_ints, default=[1, 8, 64], help="decode batch sizes, comma-separated")
    parser.add_argument("--prefill-tokens", type=_ints, default=[2048, 8192, 16384])
    parser.add_argument("--context", type=int, default=1024, help="KV-cache length each decode step reads")
    parser.add_argument("--providers", type=lambda s: [p for p in s.split(",") if p], default=list(PROVIDERS))
    parser.add_argument("--reps", type=int, default=100, help="decode replays timed (prefill: a twentieth, >= 3)")
    parser.add_argument("--toy", action="store_true", help="the toy model (cpu backend)")
    parser.add_argument("--heap-gib", type=int, default=2)
    parser.add_argument("--world-size", type=int, default=None)
    args = parser.parse_args()
    unknown = [p for p in args.providers if p not in PROVIDERS]
    if unknown:
        parser.error(f"unknown provider {unknown[0]!r}; use some of {', '.join(PROVIDERS)}")
    world = args.world_size or max(2, torch.cuda.device_count() if torch.cuda.is_available() else 2)
    iris.run(main, world, args)
