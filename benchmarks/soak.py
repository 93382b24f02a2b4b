"""Soak: many collectives of random kind, dtype, size and root, each checked against its torch reference.

    python benchmarks/soak.py --count 10000 --out results/2xH200/soak      # on GPUs
    python benchmarks/soak.py --count 30                                   # cpu backend, small sizes

Every rank draws the same sequence from one seed (the calls must match across ranks), fills its inputs with
fresh values (drawn on the device), poisons the output, runs the collective and compares. The ranks exchange
their verdicts every 100 calls; a wrong result stops the run there, naming each wrong call's number, kind,
dtype and size. The summary line counts calls per kind.
"""

import argparse
import collections
import json
import os
import random

import torch

import iris
from iris.bench.suite import default_world_size
from iris.ccl import CollectiveConfig
from iris.ccl import reference as ref
from iris.host.distributed import all_gather_object

iris.set_logger_level(iris.INFO)  # the ranks print their progress and the verdict

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast")
DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.int32, torch.int64)
CHECK_EVERY = 100  # calls between exchanges of the ranks' verdicts
TOLERANCE = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}


def _inputs(call, rank_count, shape, dtype, device):
    """Every rank's input of call ``call``, drawn on ``device`` from one seed: the same values on every rank."""
    gen = torch.Generator(device).manual_seed(call)
    if dtype.is_floating_point:
        return [torch.randn(shape, generator=gen, device=device).to(dtype) for _ in range(rank_count)]
    return [torch.randint(-1000, 1000, shape, generator=gen, device=device).to(dtype) for _ in range(rank_count)]


def _close(tri, expect):
    if not tri.dtype.is_floating_point:
        return torch.equal(tri, expect.to(tri.dtype))
    expect = expect.double()
    return ((tri.double() - expect).norm() / expect.norm().clamp_min(1e-30)).item() <= TOLERANCE[tri.dtype]


def main(count, max_elems, seed, out_dir):
    ctx = iris.iris(heap_size=16 * max_elems * 8 + (64 << 20))
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    dev = ctx.get_device()
    rng = random.Random(seed)  # the same draws on every rank
    buffers = {dtype: (ctx.empty(world * max_elems, dtype=dtype), ctx.empty(world * max_elems, dtype=dtype))
               for dtype in DTYPES}
    done, wrong = collections.Counter(), []
    for call in range(count):
        kind, dtype = rng.choice(KINDS), rng.choice(DTYPES)
        n = rng.randint(1, max_elems)  # elements per rank slice
        algorithm = rng.choice(("auto", "one_shot", "two_shot"))
        rs_algorithm = rng.choice(("auto", "pull", "push"))
        root = rng.randrange(world)
        inp_all, out_all = buffers[dtype]
        xs = _inputs(seed * 1_000_003 + call, world, (world * n,), dtype, dev)
        inp, out = inp_all[:world * n], out_all[:world * n]
        inp.copy_(xs[rank])
        out.fill_(-7)  # poison
        ctx.barrier()
        if kind == "all_reduce":
            ctx.ccl.all_reduce(out, inp, config=CollectiveConfig(algorithm=algorithm))
            tri, expect = out, ref.all_reduce(xs, "sum")
        elif kind == "all_gather":
            ctx.ccl.all_gather(out, inp[:n])
            tri, expect = out, torch.cat([x[:n] for x in xs])
        elif kind == "reduce_scatter":
            ctx.ccl.reduce_scatter_tensor(out[:n], inp, config=CollectiveConfig(algorithm=rs_algorithm))
            tri, expect = out[:n], ref.reduce_scatter(xs, rank, "sum")
        elif kind == "all_to_all":
            ctx.ccl.all_to_all_single(out, inp)
            tri, expect = out, ref.all_to_all_single(xs, rank)
        else:
            ctx.ccl.broadcast(inp, src=root)
            tri, expect = inp, xs[root]
        if not _close(tri, expect):
            wrong.append(f"call {call} ({kind}, {dtype}, {n} elements per slice, algorithm={algorithm}, "
                         f"reduce_scatter algorithm={rs_algorithm}, root={root})")
        done[kind] += 1
        if (call + 1) % CHECK_EVERY == 0 or call + 1 == count:  # verdicts cross ranks in batches: no host
            verdicts = all_gather_object(wrong)                   # round trip per call
            if any(verdicts):
                raise AssertionError("soak: wrong results\n" + "\n".join(
                    f"rank {r}: {w}" for r, ws in enumerate(verdicts) for w in ws[:5]))
            if rank == 0 and (call + 1) % (10 * CHECK_EVERY) == 0:
                ctx.info(f"soak: {call + 1} of {count} checked")
    summary = {"calls": count, "wrong": 0, "per_kind": dict(done), "world_size": world, "max_elems": max_elems,
               "seed": seed, "device": str(dev)}
    if rank == 0:
        ctx.info(f"soak: {count} collectives checked, none wrong: {dict(done)}")
        if out_dir:
            os.makedirs(out_dir, exist_ok=True)
            with open(os.path.join(out_dir, "soak.json"), "w") as f:
                json.dump(summary, f, indent=1)
    return summary


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--max-elems", type=int, default=None, help="largest slice per rank (default by backend)")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--out", default=None)
    parser.add_argument("--world-size", type=int, default=None)
    args = parser.parse_args()
    on_cpu = iris.platform.backend.BACKEND == "cpu"
    max_elems = args.max_elems or (300 if on_cpu else 1 << 20)
    iris.run(main, args.world_size or default_world_size(), args.count, max_elems, args.seed, args.out)
