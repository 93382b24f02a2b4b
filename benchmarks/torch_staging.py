"""What staging costs the torch.distributed backend "iris": ordinary tensors through the heap buffer against
heap tensors handed to ``ctx.ccl`` directly, and against NCCL where each rank has a GPU of its own.

    python benchmarks/torch_staging.py [--world-size 2] [--ops all_reduce,all_gather] [--max-bytes 256M]

Per op and message size (bf16, bytes per rank), in microseconds per call (CUDA-graph replay of ``--reps``
calls, median of ``--repeats``, slowest rank): ``direct`` (``ctx.ccl`` on heap tensors), ``staged``
(``dist.<op>`` on ordinary tensors through an iris group), ``copy`` (the staging copy alone), and ``nccl``
(``dist.<op>`` on the default group, only when it is NCCL: ranks sharing a GPU get gloo, whose figures would
not be comparable). ``crossover`` names the smallest size from which staged iris is no faster than NCCL. On the
cpu backend the host clock times plain calls (no graphs), at small sizes only.
"""

import argparse
import statistics

import torch
import torch.distributed as dist

import iris

iris.set_logger_level(iris.INFO)  # the ranks print their ctx.info lines as HH:MM:SS INFO [Iris] [rank/world] ...

DTYPE = torch.bfloat16


def _bytes(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(float(text[:-1]) * units[text[-1].upper()]) if text[-1].upper() in units else int(text)


def _time_us(ctx, fn, reps, repeats):
    """Median microseconds per call on this rank: ``reps`` calls replayed from one CUDA graph on GPUs."""
    cuda = ctx.get_device().type == "cuda"
    fn()  # compiles, makes the group's flags
    if not cuda:
        import time

        times = []
        for _ in range(repeats):
            ctx.barrier()
            start = time.perf_counter()
            for _ in range(reps):
                fn()
            times.append((time.perf_counter() - start) / reps * 1e6)
        return statistics.median(times)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        fn()
    stream.synchronize()
    ctx.barrier()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for _ in range(reps):
            fn()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        ctx.barrier()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / reps)
    return statistics.median(times)


def _cases(ctx, op, n, group, heap_in, heap_out, nccl):
    """name -> call, for one message of ``n`` elements per rank."""
    import iris.distributed

    world = ctx.get_num_ranks()
    x = torch.randn(n, device=ctx.get_device()).to(DTYPE)
    staged = iris.distributed.staging_for(ctx).view(DTYPE, min(n, iris.distributed.staging_for(ctx).elements(DTYPE)))
    if op == "all_reduce":
        cases = {"direct": lambda: ctx.ccl.all_reduce(heap_out[:n], heap_in[:n]),
                 "staged": lambda: dist.all_reduce(x, group=group)}
        if nccl:
            cases["nccl"] = lambda: dist.all_reduce(x)
    else:
        out = torch.empty(world * n, dtype=DTYPE, device=ctx.get_device())
        cases = {"direct": lambda: ctx.ccl.all_gather(heap_out[:world * n], heap_in[:n]),
                 "staged": lambda: dist.all_gather_into_tensor(out, x, group=group)}
        if nccl:
            cases["nccl"] = lambda: dist.all_gather_into_tensor(out, x)
    cases["copy"] = lambda: staged.copy_(x[:staged.numel()])
    return cases


def main(ops, max_bytes, reps, repeats):
    import iris.distributed

    on_gpu = iris.platform.backend.BACKEND != "cpu"
    max_bytes = max_bytes if on_gpu else min(max_bytes, 64 << 10)
    world_size = dist.get_world_size() if dist.is_initialized() else None
    max_n = max_bytes // DTYPE.itemsize
    staging_bytes = (64 << 20) if on_gpu else (1 << 20)
    ctx = iris.iris(heap_size=(2 + (world_size or 8)) * max_bytes + 2 * staging_bytes + (64 << 20))
    iris.distributed.set_context(ctx, staging_bytes)
    world, rank = ctx.get_num_ranks(), ctx.get_rank()
    group = dist.new_group(backend="iris")
    heap_in, heap_out = ctx.randn(max_n, dtype=DTYPE), ctx.zeros(world * max_n, dtype=DTYPE)
    nccl = dist.get_backend() == "nccl"
    reps, repeats = (reps, repeats) if on_gpu else (3, 3)
    sizes, size = [], 4 << 10
    while size <= max_bytes:
        sizes.append(size)
        size *= 4
    rows = []
    for op in ops:
        for nbytes in sizes:
            n = nbytes // DTYPE.itemsize
            times = {name: _time_us(ctx, fn, reps, repeats)
                     for name, fn in _cases(ctx, op, n, group, heap_in, heap_out, nccl).items()}
            slowest = {name: max(t[name] for t in iris.host.distributed.all_gather_object(times)) for name in times}
            rows.append((op, nbytes, slowest))
    if rank == 0:
        names = ["direct", "staged", "copy"] + (["nccl"] if nccl else [])
        ctx.info(f"{'op':<11} {'bytes':>10} " + " ".join(f"{n + ' us':>10}" for n in names) + f" {'staging':>8}")
        crossover = {}
        for op, nbytes, t in rows:
            extra = (t["staged"] - t["direct"]) / t["direct"] * 100
            ctx.info(f"{op:<11} {nbytes:>10} " + " ".join(f"{t[n]:>10.1f}" for n in names) + f" {extra:>+7.0f}%")
            if nccl and t["staged"] >= t["nccl"] and op not in crossover:
                crossover[op] = nbytes
        if nccl:
            ctx.info("staged iris no faster than NCCL from: " + (", ".join(f"{op} {b} bytes" for op, b in
                                                                          crossover.items()) or "no size measured"))
        ctx.info(f"torch_staging: {len(rows)} sizes on {world} ranks ({'NCCL' if nccl else 'no NCCL'} beside)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--ops", default="all_reduce,all_gather")
    parser.add_argument("--max-bytes", default="256M")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    iris.run(main, args.world_size, args.ops.split(","), _bytes(args.max_bytes), args.reps, args.repeats)
