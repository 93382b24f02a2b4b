"""Two simulated nodes of two ranks on the GPUs at hand (ranks share a GPU in simulation mode): every hierarchical
collective at GPU sizes against torch on every rank's inputs, the bytes handed to the inter-node stage, a CUDA
graph replay of all_reduce (NCCL rail only), and the time of all_reduce beside the rail engine's all_reduce of
the whole tensor. ``python scripts/nodes_check.py OUT_JSON``; the rail engine is IRIS_RAIL_BACKEND's
(nccl by default on GPUs). Prints one line per check, then ``ENGINE <name>`` and ``ALL OK`` or ``FAILED``.
"""

import faulthandler
import hashlib
import json
import os
import sys
import time

import torch
import torch.distributed as dist

import iris

SIZES = (1 << 12, 1 << 22)  # elements: latency-bound and bandwidth-bound
REPS = 20


def _sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _time(fn, reps):
    fn()
    _sync()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    _sync()
    return (time.perf_counter() - start) / reps * 1e6


_START = time.perf_counter()


def _progress(rows):
    """Rank 0 prints each check as it ends (a slow start or a stuck stage shows where it is)."""
    if int(os.environ.get("RANK", 0)) == 0:
        print(f"[{time.perf_counter() - _START:6.1f} s] {rows[-1]['check']}: {'ok' if rows[-1]['ok'] else 'FAIL'}",
              flush=True)


def _check(name, tri, ref, rows):
    ok = torch.equal(tri.cpu(), ref.cpu())
    rows.append({"check": name, "ok": ok})
    _progress(rows)
    return ok


def main():
    if os.environ.get("NODES_CHECK_DUMP_S"):  # each rank prints its Python stack after that long: where it waits
        faulthandler.dump_traceback_later(float(os.environ["NODES_CHECK_DUMP_S"]), exit=False)
    ctx = iris.iris(1 << 30)
    rank, world, local = ctx.get_rank(), ctx.num_ranks, ctx.local_world_size
    if rank == 0:
        print(f"[{time.perf_counter() - _START:6.1f} s] context made: {ctx.num_nodes} nodes of {local}, rail on "
              f"{ctx.rail_engine}", flush=True)
    device = ctx.get_device()
    rows, timings = [], []
    on_cpu = device.type == "cpu"  # a dry run of the script in the interpreter: tiny sizes
    for n in (64, 256) if on_cpu else SIZES:
        for dtype in (torch.int32, torch.bfloat16):
            every = [torch.randint(-50, 50, (n,), generator=torch.Generator().manual_seed(7 + r)).to(dtype)
                     for r in range(world)]
            inp = ctx.empty(n, dtype=dtype)
            inp.copy_(every[rank])
            out = ctx.full((n,), -77, dtype=dtype)
            ctx.rail.reset()
            ctx.ccl.all_reduce(out, inp)
            ref = sum(e.float() for e in every).to(dtype)  # small integers: exact in bf16 sums of 4
            _check(f"all_reduce {dtype} n={n}", out, ref, rows)
            rows.append({"check": f"all_reduce bytes handed {dtype} n={n}", "ok": ctx.rail.bytes_handed == n // local *
                         dtype.itemsize})
            bits = iris.host.distributed.all_gather_object(hashlib.sha1(out.cpu().view(
                torch.int16 if dtype.itemsize == 2 else torch.int32).numpy().tobytes()).hexdigest())
            rows.append({"check": f"all_reduce same bits on every rank {dtype} n={n}", "ok": len(set(bits)) == 1})
            chunk = n // world
            gathered = ctx.full((world * chunk,), -77, dtype=dtype)
            ctx.ccl.all_gather(gathered, inp[:chunk])
            _check(f"all_gather {dtype} n={n}", gathered, torch.cat([e[:chunk] for e in every]), rows)
            piece = ctx.full((chunk,), -77, dtype=dtype)
            ctx.ccl.reduce_scatter(piece, inp[:world * chunk])
            _check(f"reduce_scatter {dtype} n={n}", piece, ref[rank * chunk:(rank + 1) * chunk], rows)
            moved = ctx.full((world * chunk,), -77, dtype=dtype)
            ctx.ccl.all_to_all(moved, inp[:world * chunk])
            _check(f"all_to_all {dtype} n={n}", moved,
                   torch.cat([e[rank * chunk:(rank + 1) * chunk] for e in every]), rows)
            sent = out.clone() if rank == world - 1 else torch.full_like(out, -77)
            if rank == world - 1:
                sent.copy_(every[rank])
            ctx.ccl.broadcast(sent, src=world - 1)
            _check(f"broadcast {dtype} n={n}", sent, every[world - 1], rows)
        if ctx.rail_engine == "nccl":
            x = ctx.ones(n, dtype=torch.float32)
            y = ctx.zeros(n, dtype=torch.float32)
            ctx.ccl.all_reduce(y, x)
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                ctx.ccl.all_reduce(y, x)
            y.fill_(-77)
            x.fill_(2)
            graph.replay()
            torch.cuda.synchronize()
            rows.append({"check": f"all_reduce graph replay n={n}", "ok": bool((y == 2 * world).all())})
        x = ctx.ones(n, dtype=torch.bfloat16)
        y = ctx.zeros(n, dtype=torch.bfloat16)
        flat = torch.ones(n, dtype=torch.bfloat16, device=device)
        # The engine alone on the whole tensor over the rail: the inter-node traffic a flat all_reduce would make
        # (a flat NCCL group of the world cannot form here: two ranks of one simulated node share a GPU).
        timings.append({"n": n, "iris_hierarchical_us": _time(lambda: ctx.ccl.all_reduce(y, x), 2 if on_cpu else REPS),
                        f"{ctx.rail_engine}_rail_whole_us": _time(lambda: dist.all_reduce(flat, group=ctx.rail_group),
                                                                        2 if on_cpu else REPS)})
    ctx.barrier()
    return {"rank": rank, "engine": ctx.rail_engine, "rows": rows, "timings": timings}


if __name__ == "__main__":
    results = iris.launch(main, 4, nodes=2, timeout_s=220)
    for row in results[0]["rows"]:
        bad = [r["rank"] for r in results if not next(x for x in r["rows"] if x["check"] == row["check"])["ok"]]
        print(f"{'ok  ' if not bad else 'FAIL'} {row['check']}" + (f" (ranks {bad})" if bad else ""))
    for t in results[0]["timings"]:
        print("time", json.dumps(t))
    with open(sys.argv[1] if len(sys.argv) > 1 else os.devnull, "w") as f:
        json.dump(results, f, indent=1)
    print("ENGINE", results[0]["engine"])
    print("ALL OK" if all(x["ok"] for r in results for x in r["rows"]) else "FAILED")
