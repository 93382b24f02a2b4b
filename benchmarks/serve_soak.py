"""Serving soak: a server's loop on the heap, checked every step, with the heap's memory watched.

    python benchmarks/serve_soak.py --steps 200000 --minutes 60 --out results/1xH200/serve_soak   # GPUs
    python benchmarks/serve_soak.py --steps 40                                                    # cpu backend

Each step draws a token count (the same on every rank, from one seed), allocates its activations on the heap,
runs an all_reduce over the world, an all_gather and a push reduce_scatter over a subgroup (ranks 0 and 1, when
the world has more than two), and a fused matmul_all_reduce, checks each result against a float64 reference of
every rank's inputs (which any rank can regenerate), and drops everything. It reports steps/s, the heap's
high-water mark (the most bytes it mapped, ``reserved_bytes.all.peak``; the vmem heap starts small and grows to
what the loop needs) beside the largest set of bytes a step holds live (its tensors and the workspaces), and
whether the heap grew after the first quarter of the run. Memory is flat when the high-water mark stays within
twice the largest live set (or the starting size) and nothing grows after warm-up.
"""

import argparse
import json
import os
import random
import time

import torch

import iris
from iris.ccl import CollectiveConfig
from iris.host.memory.allocator import align_up
from iris.host.distributed import all_gather_object

iris.set_logger_level(iris.INFO)  # the ranks print their ctx.info lines as HH:MM:SS INFO [Iris] [rank/world] ...

CHECK_EVERY = 10  # steps between exchanges of the ranks' verdicts


def _values(step, rank, salt, shape, device):
    """Small integers (exact in fp32 sums) for ``rank``'s input ``salt`` of ``step``: any rank can remake them on
    its own device (a seeded generator there), so the float64 references are computed where the results are."""
    gen = torch.Generator(device).manual_seed((step * 1_000_003 + rank) * 31 + salt)
    values = torch.randint(-8, 9, shape, generator=gen, device=device).to(torch.float32)
    values[values == 0] = 1
    return values.to(device)


def main(steps, max_tokens, seed, out_dir, minutes=None, hidden=None, allocator="vmem"):
    import torch.distributed as dist

    on_cpu = iris.platform.backend.BACKEND == "cpu"
    hidden = hidden or (32 if on_cpu else 4096)
    start_heap = 1 << 20 if on_cpu else 1 << 26  # a starting size: the vmem heap grows to what the loop needs
    ctx = iris.iris(heap_size=start_heap, allocator_type=allocator)
    rank, world, dev = ctx.get_rank(), ctx.get_num_ranks(), ctx.get_device()
    start_reserved = ctx.memory_stats()["reserved_bytes.all.current"]
    members = [0, 1] if world > 2 else list(range(world))
    sub = dist.new_group(members)
    rng = random.Random(seed)
    wrong, largest_live, reserved_after_warmup = [], 0, None
    push = CollectiveConfig(algorithm="push")
    began = time.perf_counter()
    done = 0
    for step in range(steps):
        tokens = rng.randint(1, max_tokens)
        live = []  # every heap tensor this step holds, for the live-set figure

        def heap(t):
            live.append(align_up(t.numel() * t.element_size()))
            return t

        # ---- world all_reduce of the activations
        act = heap(ctx.empty(tokens, hidden))
        act.copy_(_values(step, rank, 0, (tokens, hidden), dev))
        summed = heap(ctx.empty(tokens, hidden))
        summed.fill_(-77.0)
        ctx.ccl.all_reduce(summed, act)
        expect = sum(_values(step, r, 0, (tokens, hidden), dev).double() for r in range(world))
        if not torch.equal(summed.double(), expect):
            wrong.append(f"step {step}: all_reduce of {tokens} tokens")
        # ---- subgroup all_gather and push reduce_scatter (members only; heap allocation is collective: everyone)
        gathered = heap(ctx.empty(len(members) * tokens, hidden))
        if rank in members:
            size, index = len(members), members.index(rank)
            inputs = [_values(step, r, 1, (tokens, hidden), dev) for r in members]
            gathered.fill_(-77.0)
            ctx.ccl.all_gather(gathered, inputs[index], group=sub)
            expect = torch.cat(inputs).double()  # the gathered rows; each member's reduce_scatter slice is size x
            if not torch.equal(gathered.double(), expect):
                wrong.append(f"step {step}: subgroup all_gather of {tokens} tokens")
            scattered = torch.full((tokens, hidden), -77.0, device=dev)
            ctx.ccl.reduce_scatter(scattered, gathered, group=sub, config=push)
            if not torch.equal(scattered.double(), size * expect[index * tokens:(index + 1) * tokens]):
                wrong.append(f"step {step}: subgroup push reduce_scatter of {tokens} tokens")
        # ---- fused matmul_all_reduce: out = sum over ranks of act_r[:, K/W slice] @ w_r
        k_local, m = 16, -(-tokens // world) * world  # the op splits M over the ranks: padded to a multiple
        a = heap(ctx.empty(m, k_local))
        a.copy_(_values(step, rank, 2, (m, k_local), dev))
        w = _values(step, rank, 3, (k_local, 16), dev)
        out = heap(ctx.empty(m, 16))
        out.fill_(-77.0)
        ctx.ops.matmul_all_reduce(out, a, w)
        expect = sum(_values(step, r, 2, (m, k_local), dev).double()
                     @ _values(step, r, 3, (k_local, 16), dev).double() for r in range(world))
        if not torch.allclose(out.double(), expect, rtol=1e-5, atol=1e-3):
            wrong.append(f"step {step}: matmul_all_reduce of {tokens} tokens")
        largest_live = max(largest_live, sum(live) + ctx.workspaces.bytes()["heap"])
        del act, summed, gathered, a, out, live
        if rank in members:
            del scattered
        done = step + 1
        over = minutes is not None and time.perf_counter() - began > 60 * minutes
        if done == max(1, steps // 4) or (minutes is not None and reserved_after_warmup is None
                                          and time.perf_counter() - began > 15 * minutes):
            reserved_after_warmup = ctx.memory_stats()["reserved_bytes.all.current"]
        if done % CHECK_EVERY == 0 or done == steps or over:
            verdicts = all_gather_object((wrong[:5], over))
            if any(v[0] for v in verdicts):
                raise AssertionError("serve_soak: wrong results\n" + "\n".join(
                    f"rank {r}: {w}" for r, (ws, _) in enumerate(verdicts) for w in ws))
            if any(v[1] for v in verdicts):
                break
    elapsed = time.perf_counter() - began
    stats = ctx.memory_stats()
    summary = {
        "steps": done, "steps_per_s": done / elapsed, "wrong": 0, "world_size": world, "max_tokens": max_tokens,
        "hidden": hidden, "allocator": allocator, "device": str(dev),
        "heap_peak_bytes": stats["reserved_bytes.all.peak"], "largest_live_bytes": largest_live,
        "allocated_peak_bytes": stats["allocated_bytes.all.peak"], "start_bytes": start_reserved,
        "reserved_bytes": stats["reserved_bytes.all.current"], "reserved_after_warmup": reserved_after_warmup,
        "grew_after_warmup": reserved_after_warmup is not None
        and stats["reserved_bytes.all.current"] > reserved_after_warmup,
        "agreements": stats["num_agreements"], "grows": stats["num_grows"], "workspace_bytes": stats["workspace_bytes"],
    }
    if rank == 0:
        ctx.info(f"serve_soak: {done} steps, {summary['steps_per_s']:.1f} steps/s, heap high-water "
                 f"{summary['heap_peak_bytes']} bytes for a largest live set of {largest_live} "
                 f"(reserved {summary['reserved_bytes']}, grew after warm-up: {summary['grew_after_warmup']})")
        if out_dir:
            os.makedirs(out_dir, exist_ok=True)
            with open(os.path.join(out_dir, "serve_soak.json"), "w") as f:
                json.dump(summary, f, indent=1)
    ctx.close()
    return summary


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--minutes", type=float, default=None, help="stop after this long (GPU runs)")
    parser.add_argument("--max-tokens", type=int, default=None)
    parser.add_argument("--hidden", type=int, default=None)
    parser.add_argument("--allocator", default="vmem", choices=("torch", "vmem"))
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--out", default=None)
    parser.add_argument("--world-size", type=int, default=None)
    args = parser.parse_args()
    on_cpu = iris.platform.backend.BACKEND == "cpu"
    max_tokens = args.max_tokens or (64 if on_cpu else 8192)
    from iris.bench.suite import default_world_size

    iris.run(main, args.world_size or default_world_size(), args.steps, max_tokens, args.seed, args.out,
             args.minutes, args.hidden, args.allocator)
