"""MoE dispatch + combine side by side: iris's ``MoEDispatcher`` (eager, and replayed from a CUDA graph with
``validate=False``) against the path a user has today, Megatron-style: permute by expert, ``all_to_all_single``
of the counts and then of the rows with splits, sort by local expert; and the reverse with a weighted sum.

    python benchmarks/moe.py --out results/1xH200/moe --world 1              # NCCL baseline beside iris
    IRIS_BACKEND=simulation python benchmarks/moe.py --out /tmp/moe --world 2 # ranks sharing one GPU
    python benchmarks/moe.py --out /tmp/moe --quick                            # tiny, on the cpu backend
    python benchmarks/moe.py --out /tmp/moe --host-only                        # host path, kernels stubbed

Shapes: the DeepSeek-V3 layer (H 7168, 256 experts, top-8, bf16) at 4096 tokens per rank (prefill) and 128
(decode). Bytes per rank follow DeepEP: ``deepep_bytes`` = the tokens this rank receives, each once however many
of its experts it has (its own included), x H x 2; ``moved_bytes`` = the rows iris moves (one per token and
expert). ``host_syncs`` = the host synchronisations a call makes; ``host_us`` = the median time for an eager call
to return to Python with the device drained first (the host's part of the call); ``GPU ops`` = the kernels and
copies one call puts on the GPU (torch.profiler). Providers: ``iris`` (eager, ``validate=True``: the route kernel
checks the ids, no synchronisation), ``iris_nosync`` (eager, ``validate=False``), ``iris_graph`` (``validate=False``,
replayed),
``torch_a2a``. ``--host-only`` times the iris host path with the kernels replaced by no-ops (the cpu backend,
where kernels run in the interpreter: what Python and torch cost per call, kernel launches aside). The torch path
needs NCCL, so it runs only where every rank has a GPU of its own (simulation shares one: NCCL refuses two ranks on
one device).
"""

import argparse
import json
import os
import time

import torch
import torch.distributed as dist

import iris
from iris.ccl import MoEDispatchConfig
from iris.ccl.moe.routing import owners


def _routing(rank, T, E, k, H, dev):
    gen = torch.Generator().manual_seed(1000 + rank)
    x = torch.randn((T, H), generator=gen).to(torch.bfloat16)
    logits = torch.randn((T, E), generator=gen)
    w, idx = torch.topk(logits, k, dim=1)
    return x.to(dev), idx.to(torch.int32).to(dev), torch.softmax(w, -1).to(dev)


def _time(fn, iters, warmup, barrier):
    for _ in range(warmup):
        fn()
    if torch.cuda.is_available() and iris.platform.backend.BACKEND != "cpu":
        times = []
        for _ in range(iters):
            barrier()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
        return sum(times) / len(times)
    barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t0) * 1e3 / iters


def _host_us(fn, iters, dev):
    """Microseconds for one call to return to Python, the device drained before each (so a host synchronisation
    inside the call waits for this call's own work only): the host's part of an eager call."""
    times = []
    for _ in range(iters):
        if dev.type == "cuda":
            torch.cuda.synchronize()
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    return sorted(times)[len(times) // 2] * 1e6


def _gpu_ops(fn, dev):
    """Kernels and copies one call puts on the GPU (torch.profiler's CUDA activity), or None without one."""
    if dev.type != "cuda":
        return None
    try:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        return sum(1 for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)
    except Exception:  # a profiler the image lacks leaves the count out, not the benchmark
        return None


class TorchPath:
    """The permute / all_to_all_single / sort path (Megatron-Core's MoEAlltoAllTokenDispatcher), one rank."""

    # host synchronisations a call makes: bincount sizes its output from the ids' maximum; the send and receive
    # splits are read on the host; repeat_interleave sizes its output from the counts
    host_syncs = 3

    def __init__(self, owner, E, world, rank):
        self.owner, self.E, self.world, self.rank = owner, E, world, rank
        self.local = (owner.cpu() == rank).nonzero().flatten()

    def dispatch(self, x, idx):
        k = idx.shape[1]
        flat = idx.reshape(-1).to(torch.int64)
        # rank-major, then expert: sorting by expert id groups by owner too under a contiguous assignment
        order = torch.argsort(flat, stable=True)
        permuted = x[order // k]
        counts = torch.bincount(flat, minlength=self.E).to(torch.int64)  # [E]
        recv_counts = torch.empty_like(counts)  # [W * L]: per source rank, per local expert
        dist.all_to_all_single(recv_counts, counts)
        both = torch.stack([counts.view(self.world, -1).sum(1), recv_counts.view(self.world, -1).sum(1)]).tolist()
        send_splits, recv_splits = both  # one host synchronisation for both
        recv = permuted.new_empty((sum(recv_splits), x.shape[1]))
        dist.all_to_all_single(recv, permuted, recv_splits, send_splits)
        # sort the [source][local expert] chunks into [local expert][source]
        chunk = recv_counts.view(self.world, -1)
        chunk_id = torch.repeat_interleave(torch.arange(chunk.numel(), device=x.device), chunk.reshape(-1))
        local_expert = chunk_id % chunk.shape[1]
        by_expert = torch.argsort(local_expert, stable=True)
        return recv[by_expert], (order, send_splits, recv_splits, by_expert, x.shape[0], k)

    def combine(self, y, state, w):
        order, send_splits, recv_splits, by_expert, T, k = state
        unsorted = torch.empty_like(y)
        unsorted[by_expert] = y
        back = y.new_empty((sum(send_splits), y.shape[1]))
        dist.all_to_all_single(back, unsorted, send_splits, recv_splits)
        weights = w.reshape(-1)[order].to(torch.float32)[:, None]
        out = torch.zeros((T, y.shape[1]), dtype=torch.float32, device=y.device)
        out.index_add_(0, order // k, back.to(torch.float32) * weights)
        return out.to(y.dtype)


def _body(T, H, E, k, iters, warmup):
    world = int(os.environ.get("WORLD_SIZE", "1"))
    heap = int(os.environ.get("MOE_HEAP", str(1 << 32)))
    ctx = iris.iris(heap)
    rank, world, dev = ctx.get_rank(), ctx.get_num_ranks(), ctx.get_device()
    x, idx, w = _routing(rank, T, E, k, H, dev)
    rows, host, gpu_ops = {}, {}, {}
    eager = ctx.ccl.moe_dispatcher(H, E, k, T)
    owner = owners(eager.expt_assignment)

    def iris_step(d):
        buf, meta, handle = d.dispatch(x, idx, w)
        return d.combine(buf, handle, weighted=True)

    free = ctx.ccl.moe_dispatcher(H, E, k, T, config=MoEDispatchConfig(validate=False))
    rows["iris"] = (_time(lambda: iris_step(eager), iters, warmup, ctx.barrier), 0)
    host["iris"] = _host_us(lambda: iris_step(eager), iters, dev)
    rows["iris_nosync"] = (_time(lambda: iris_step(free), iters, warmup, ctx.barrier), 0)
    host["iris_nosync"] = _host_us(lambda: iris_step(free), iters, dev)
    gpu_ops["iris"] = _gpu_ops(lambda: iris_step(eager), dev)
    ours = iris_step(eager).float()
    if dev.type == "cuda":
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            iris_step(free)
        stream.synchronize()
        ctx.barrier()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            iris_step(free)
        rows["iris_graph"] = (_time(graph.replay, iters, warmup, ctx.barrier), 0)
    if (dist.get_backend() == "nccl" or dev.type == "cpu") and E % world == 0:  # gloo moves cpu tensors
        path = TorchPath(owner.to(dev), E, world, rank)

        def torch_step():
            recv, state = path.dispatch(x, idx)
            return path.combine(recv, state, w)

        rows["torch_a2a"] = (_time(torch_step, iters, warmup, ctx.barrier), TorchPath.host_syncs)
        host["torch_a2a"] = _host_us(torch_step, iters, dev)
        gpu_ops["torch_a2a"] = _gpu_ops(torch_step, dev)
        theirs = torch_step().float()  # the same sums in another order: within bf16 rounding
        diff = ((ours - theirs).abs().max() / theirs.abs().max().clamp_min(1e-30)).item()
        print(f"rank {rank} T {T}: iris vs torch path, max diff relative to max |out|: {diff:.2e}")
    # DeepEP's bytes: tokens this rank receives, once per token whatever the number of its experts
    unique, moved = 0, 0
    for s in range(world):
        _, idx_s, _ = _routing(s, T, E, k, 1, "cpu")
        mine = owner[idx_s.to(torch.int64)] == rank  # [T, k]
        unique += int(mine.any(1).sum())
        moved += int(mine.sum())
    return {name: dict(ms=ms, host_syncs=syncs, deepep_bytes=unique * H * 2, moved_bytes=moved * H * 2,
                       host_us=host.get(name), gpu_ops=gpu_ops.get(name)) for name, (ms, syncs) in rows.items()}


class _NoKernel:
    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


def _host_only_body(T, H, E, k, iters):
    from iris.ccl.moe import dispatch as moe_dispatch

    for name in ("_route_kernel", "_counts_kernel", "_dispatch_rows_kernel", "_combine_push_kernel",
                 "_combine_reduce_kernel"):
        setattr(moe_dispatch, name, _NoKernel())
    ctx = iris.iris(int(os.environ.get("MOE_HEAP", str(1 << 32))))
    x, idx, w = _routing(ctx.get_rank(), T, E, k, H, ctx.get_device())
    out = {}
    for name, validate in (("iris", True), ("iris_nosync", False)):
        d = ctx.ccl.moe_dispatcher(H, E, k, T, config=MoEDispatchConfig(validate=validate))

        def step():
            buf, meta, handle = d.dispatch(x, idx, w)
            return d.combine(buf, handle, weighted=True)

        for _ in range(5):
            step()
        out[name] = _host_us(step, iters, ctx.get_device())
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--world", type=int, default=1)
    parser.add_argument("--tokens", default="4096,128")
    parser.add_argument("--quick", action="store_true", help="tiny shapes for the cpu backend")
    parser.add_argument("--host-only", action="store_true", help="the host path alone, kernels stubbed")
    args = parser.parse_args()
    if args.host_only:
        os.makedirs(args.out, exist_ok=True)
        records = []
        for T in [int(t) for t in args.tokens.split(",")]:
            per_rank = iris.launch(_host_only_body, args.world, T, 7168, 256, 8, 200)
            records += [dict(op="moe_host_path", provider=name, world_size=args.world, tokens=T, host_us=us,
                             backend=iris.platform.backend.BACKEND) for name, us in per_rank[0].items()]
        with open(os.path.join(args.out, "moe_host.json"), "w") as f:
            json.dump(records, f, indent=1)
        for r in records:
            print(f"{r['provider']:<12} W {r['world_size']} tokens {r['tokens']:>5}: host {r['host_us']:.0f} us per "
                  "dispatch + combine, kernels stubbed")
        return
    H, E, k = (32, 8, 2) if args.quick else (7168, 256, 8)
    token_counts = [8] if args.quick else [int(t) for t in args.tokens.split(",")]
    iters, warmup = (2, 1) if args.quick else (20, 5)
    os.makedirs(args.out, exist_ok=True)
    pool = iris.RankPool(args.world)
    records = []
    try:
        for T in token_counts:
            per_rank = pool.run(_body, T, H, E, k, iters, warmup)
            for name in per_rank[0]:
                ms = max(r[name]["ms"] for r in per_rank)  # the slowest rank's mean
                dbytes = min(r[name]["deepep_bytes"] for r in per_rank)
                records.append(dict(op="moe_dispatch_combine", provider=name, world_size=args.world, tokens=T,
                                    hidden=H, experts=E, topk=k, dtype="bfloat16", ms=ms,
                                    host_syncs=per_rank[0][name]["host_syncs"], deepep_bytes=dbytes,
                                    moved_bytes=per_rank[0][name]["moved_bytes"],
                                    deepep_GBps=2 * dbytes / ms / 1e6,
                                    moved_GBps=2 * per_rank[0][name]["moved_bytes"] / ms / 1e6,
                                    host_us=max((r[name]["host_us"] for r in per_rank
                                                 if r[name]["host_us"] is not None), default=None),
                                    gpu_ops=per_rank[0][name]["gpu_ops"],
                                    backend=iris.platform.backend.BACKEND))
    finally:
        pool.close()
    with open(os.path.join(args.out, "moe.json"), "w") as f:
        json.dump(records, f, indent=1)
    # GB/s over dispatch + combine together: each moves the bytes once
    print(f"{'provider':<12} {'W':>2} {'tokens':>6} {'ms':>9} {'DeepEP GB/s':>11} {'moved GB/s':>10} "
          f"{'host syncs':>10} {'host us':>8} {'GPU ops':>7}")
    for r in records:
        host_us = "-" if r["host_us"] is None else f"{r['host_us']:.0f}"
        ops = "-" if r["gpu_ops"] is None else str(r["gpu_ops"])
        print(f"{r['provider']:<12} {r['world_size']:>2} {r['tokens']:>6} {r['ms']:>9.3f} {r['deepep_GBps']:>11.1f} "
              f"{r['moved_GBps']:>10.1f} {r['host_syncs']:>10} {host_us:>8} {ops:>7}")


if __name__ == "__main__":
    main()
