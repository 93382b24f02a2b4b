"""The fused all-reduce + residual add + RMSNorm against the unfused pairs, at decode sizes (tokens x hidden, bf16).

    python benchmarks/all_reduce_rmsnorm.py --out results/2xH200/all_reduce_rmsnorm
    python benchmarks/all_reduce_rmsnorm.py --tokens 1,8 --hidden 64 --out /tmp/arn       # cpu backend

Providers: ``iris_fused`` (``ccl.all_reduce_rmsnorm``), ``iris_all_reduce`` (``ccl.all_reduce`` alone, one-shot:
the target is within 1 us of it), ``iris_then_torch`` (``ccl.all_reduce``, then torch's add and ``rms_norm``),
``nccl_then_torch`` and ``symm_mem_then_torch`` (the same with NCCL's all-reduce or torch's
``one_shot_all_reduce``), where the machine has them. Each call is timed inside a CUDA graph of ``--calls``
calls (replays; host clock on the cpu backend); the max over ranks of each rank's median per call.
"""

import argparse
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F

import iris
from iris.bench import report
from iris.ccl import CollectiveConfig

PROVIDERS = ("iris_fused", "iris_all_reduce", "iris_then_torch", "nccl_then_torch", "symm_mem_then_torch")
EPS = 1e-5
ONE_SHOT = CollectiveConfig(algorithm="one_shot")


def _norm(x, weight):
    return F.rms_norm(x.float(), (x.shape[-1],), weight.float(), EPS).to(x.dtype)


def make_call(ctx, provider, inp, residual, weight, out, reduced, symm):
    if provider == "iris_fused":
        return lambda: ctx.ccl.all_reduce_rmsnorm(out, residual, inp, residual, weight, EPS)
    if provider == "iris_all_reduce":
        return lambda: ctx.ccl.all_reduce(reduced, inp, config=ONE_SHOT)

    def then_torch(all_reduce):
        def call():
            summed = all_reduce()
            residual.add_(summed)
            return _norm(residual, weight)
        return call

    if provider == "iris_then_torch":
        return then_torch(lambda: (ctx.ccl.all_reduce(reduced, inp, config=ONE_SHOT), reduced)[1])
    if provider == "nccl_then_torch":
        if dist.get_backend() != "nccl":
            raise RuntimeError(f"the default group is {dist.get_backend()}, not NCCL (the cpu backend, or ranks "
                               "sharing a GPU)")
        return then_torch(lambda: (reduced.copy_(inp), dist.all_reduce(reduced), reduced)[2])
    if provider == "symm_mem_then_torch":
        if symm is None:
            raise RuntimeError("torch symmetric memory needs CUDA")
        buf, name = symm
        return then_torch(lambda: torch.ops.symm_mem.one_shot_all_reduce(buf, "sum", name))
    raise ValueError(f"all_reduce_rmsnorm bench: unknown provider {provider!r}; use some of {PROVIDERS}")


def time_call(ctx, call, calls, reps):
    """Median ms per call of this rank."""
    dev = ctx.get_device()
    call()
    if dev.type != "cuda":
        import time

        times = []
        for _ in range(reps):
            ctx.barrier()
            t0 = time.perf_counter()
            call()
            times.append((time.perf_counter() - t0) * 1e3)
        return sorted(times)[len(times) // 2]
    torch.cuda.synchronize()
    ctx.barrier()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            call()
    torch.cuda.synchronize()
    ctx.barrier()
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    ctx.barrier()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        times.append((start, end))
    torch.cuda.synchronize()
    return sorted(s.elapsed_time(e) for s, e in times)[reps // 2] / calls


def main(args):
    ctx = iris.iris(heap_size=1 << 28)
    dev, rank, world = ctx.get_device(), ctx.get_rank(), ctx.get_num_ranks()
    dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
    env = report.environment(dev)
    rows = []
    for hidden in args.hidden:
        for tokens in args.tokens:
            shape = (tokens, hidden)
            gen = torch.Generator().manual_seed(1234 + rank)
            inp = ctx.empty(shape, dtype=dtype)
            inp.copy_(torch.randn(shape, generator=gen).to(dtype))
            residual = torch.randn(shape, generator=gen).to(dtype).to(dev)
            weight = torch.randn(hidden, generator=gen).to(dtype).to(dev)
            out, reduced = torch.empty_like(residual), ctx.empty(shape, dtype=dtype)
            symm = None
            if dev.type == "cuda" and "symm_mem_then_torch" in args.providers:
                try:
                    import torch.distributed._symmetric_memory as symm_mem

                    name = dist.group.WORLD.group_name
                    buf = symm_mem.empty(shape, dtype=dtype, device=dev)
                    symm_mem.rendezvous(buf, name)
                    buf.copy_(inp)
                    symm = (buf, name)
                except Exception as e:  # noqa: BLE001 - reported below as the provider's failure
                    symm = None
                    if rank == 0:
                        print(f"[all_reduce_rmsnorm] symmetric memory: {type(e).__name__}: {e}", flush=True)
            for provider in args.providers:
                try:
                    ms = time_call(ctx, make_call(ctx, provider, inp, residual, weight, out, reduced, symm),
                                   args.calls, args.reps)
                except Exception as e:  # noqa: BLE001 - a provider this machine lacks; the others still run
                    if rank == 0:
                        print(f"[all_reduce_rmsnorm] {provider} {shape}: {type(e).__name__}: {e}", flush=True)
                    continue
                everyone = [None] * world
                dist.all_gather_object(everyone, ms)
                if rank == 0:
                    print(f"[all_reduce_rmsnorm] {provider:20s} {tokens:4d} x {hidden:5d}: "
                          f"{max(everyone) * 1e3:9.2f} us", flush=True)
                rows.append(dict(op="all_reduce_rmsnorm", provider=provider, world_size=world, dtype=str(dtype),
                                 shape=f"{tokens}x{hidden}", bytes=tokens * hidden * inp.element_size(),
                                 ms_p50=max(everyone), us=max(everyone) * 1e3, timing=f"graph x{args.calls}"
                                 if dev.type == "cuda" else "host", gpu=env["gpu"], commit=env["commit"],
                                 date=env["date"]))
    base = {r["shape"]: r["us"] for r in rows if r["provider"] == "iris_all_reduce"}
    for r in rows:
        r["over_all_reduce_us"] = r["us"] - base[r["shape"]] if r["shape"] in base else None
    if rank == 0:
        title = f"all_reduce + residual + RMSNorm, {world} ranks, {env['gpu']}, {env['commit']}"
        print(report.format_table(rows, ("shape", "provider", "us", "over_all_reduce_us", "timing"), title),
              flush=True)
        if args.out:
            os.makedirs(args.out, exist_ok=True)
            report.write_results(rows, args.out, "all_reduce_rmsnorm")
    ctx.barrier()


def _ints(text):
    return [int(v) for v in text.split(",") if v]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=None)
    parser.add_argument("--tokens", type=_ints, default=[1, 8, 64])
    parser.add_argument("--hidden", type=_ints, default=[4096, 8192])
    parser.add_argument("--providers", type=lambda s: [p for p in s.split(",") if p], default=list(PROVIDERS))
    parser.add_argument("--calls", type=int, default=20, help="calls per CUDA graph")
    parser.add_argument("--reps", type=int, default=50, help="graph replays timed")
    parser.add_argument("--world-size", type=int, default=None)
    args = parser.parse_args()
    world = args.world_size or max(2, torch.cuda.device_count() if torch.cuda.is_available() else 2)
    iris.run(main, world, args)
