"""MoE dispatch + combine side by side: iris's ``MoEDispatcher`` (eager, and replayed from a CUDA graph with
``validate=False``) against the path a user has today, Megatron-style: permute by expert, ``all_to_all_single``
of the counts and then of the rows with splits, sort by local expert; and the reverse with a weighted sum.

    python benchmarks/moe.py --out results/1xH200/moe --world 1              # NCCL baseline beside iris
    IRIS_BACKEND=simulation python benchmarks/moe.py --out /tmp/moe --world 2 # ranks sharing one GPU
    python benchmarks/moe.py --out /tmp/moe --quick                            # tiny, on the cpu backend

Shapes: the DeepSeek-V3 layer (H 7168, 256 experts, top-8, bf16) at 4096 tokens per rank (prefill) and 128
(decode). Bytes per rank follow DeepEP: ``deepep_bytes`` = the tokens this rank receives, each once however many
of its experts it has (its own included), x H x 2; ``moved_bytes`` = the rows iris moves (one per token and
expert). ``host_syncs`` = the host synchronisations a call makes. The torch path needs NCCL, so it runs only
where every rank has a GPU of its own (simulation shares one: NCCL refuses two ranks on one device).
"""

import argparse
import json
import os
import time

import torch
import torch.distributed as dist

import iris
from iris.ccl import MoEDispatchConfig
from iris.ccl.moe_utils import owners


def _routing(rank, T, E, k, H, dev):
    gen = torch.Generator().manual_seed(1000 + rank)
    x = torch.randn((T, H), generator=gen).to(torch.bfloat16)
    logits = torch.randn((T, E), generator=gen)
    w, idx = torch.topk(logits, k, dim=1)
    return x.to(dev), idx.to(torch.int32).to(dev), torch.softmax(w, -1).to(dev)


def _time(fn, iters, warmup, barrier):
    for _ in range(warmup):
        fn()
    if torch.cuda.is_available() and iris.host.backend.BACKEND != "cpu":
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
    rows = {}
    eager = ctx.ccl.moe_dispatcher(H, E, k, T)
    owner = owners(eager.expt_assignment)

    def iris_step(d):
        buf, meta, handle = d.dispatch(x, idx, w)
        return d.combine(buf, handle, weighted=True)

    rows["iris"] = (_time(lambda: iris_step(eager), iters, warmup, ctx.barrier), 1)
    ours = iris_step(eager).float()
    if dev.type == "cuda":
        free = ctx.ccl.moe_dispatcher(H, E, k, T, config=MoEDispatchConfig(validate=False))
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
    return {name: dict(ms=ms, host_syncs=syncs, deepep_bytes=unique * H * 2, moved_bytes=moved * H * 2)
            for name, (ms, syncs) in rows.items()}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--world", type=int, default=1)
    parser.add_argument("--tokens", default="4096,128")
    parser.add_argument("--quick", action="store_true", help="tiny shapes for the cpu backend")
    args = parser.parse_args()
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
                                    backend=iris.host.backend.BACKEND))
    finally:
        pool.close()
    with open(os.path.join(args.out, "moe.json"), "w") as f:
        json.dump(records, f, indent=1)
    # GB/s over dispatch + combine together: each moves the bytes once
    print(f"{'provider':<12} {'W':>2} {'tokens':>6} {'ms':>9} {'DeepEP GB/s':>11} {'moved GB/s':>10} "
          f"{'host syncs':>10}")
    for r in records:
        print(f"{r['provider']:<12} {r['world_size']:>2} {r['tokens']:>6} {r['ms']:>9.3f} {r['deepep_GBps']:>11.1f} "
              f"{r['moved_GBps']:>10.1f} {r['host_syncs']:>10}")


if __name__ == "__main__":
    main()
