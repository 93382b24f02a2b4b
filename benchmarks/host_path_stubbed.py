"""The host path of eager calls alone: every remembered launch's C launcher replaced by a function that does
nothing, so what is timed is ours (keys, routes, checks, the Work, torch's dispatch), on any backend.

    PYTHONPATH=$PWD python benchmarks/host_path_stubbed.py        # the cpu backend, world size 1

us per call, the best of 7 medians of 1000 calls, beside ``torch.empty`` and gloo's all_reduce in the same run.
"""

import time

import torch
import torch.distributed as dist

import iris
import iris.compile as iris_compile
import iris.distributed as iris_distributed
from iris.platform import private


def _median_us(fn, count=1000, rounds=7):
    for _ in range(50):
        fn()
    best = float("inf")
    for _ in range(rounds):
        times = []
        for _ in range(count):
            began = time.perf_counter()
            fn()
            times.append(time.perf_counter() - began)
        best = min(best, sorted(times)[count // 2] * 1e6)
    return best


def _stub_launches(ctx):
    """Every stored launch takes its direct path, into a launcher that does nothing."""
    fake = (lambda *args: None, (None,) * 9, 1, 1, 1)
    for entry in ctx.launches._entries.values():
        launch = entry[0]
        launch._direct, launch._device, launch._tail = fake, "stub", launch._tail or (None,) * 8
    private.current_device = lambda: "stub"
    private.no_launch_hooks = lambda: True
    private.current_stream = lambda device: 0


def main():
    ctx = iris.iris(heap_size=1 << 27)
    iris_compile.set_context(ctx)
    iris_distributed.set_context(ctx)
    group = dist.new_group(backend="iris")
    n, dtype = 4096, torch.bfloat16  # 8 KiB
    inp, out = ctx.empty(n, dtype=dtype).normal_(), ctx.empty(n, dtype=dtype)
    piece, plain = torch.empty(n, dtype=dtype), torch.randn(n, dtype=dtype)
    calls = {
        "ctx.ccl.all_reduce 8 KiB": lambda: ctx.ccl.all_reduce(out, inp),
        "ctx.ccl.reduce_scatter 8 KiB": lambda: ctx.ccl.reduce_scatter(piece, inp),
        "ctx.ccl.all_gather 8 KiB": lambda: ctx.ccl.all_gather(out, inp),
        "dist.all_reduce, iris backend": lambda: dist.all_reduce(plain, group=group),
        "torch.ops.iris.all_reduce": lambda: torch.ops.iris.all_reduce(plain),
    }
    for fn in calls.values():  # compile and remember
        fn()
        fn()
    _stub_launches(ctx)
    rows = {"torch.empty 1 KiB": _median_us(lambda: torch.empty(1024, dtype=torch.uint8)),
            "ctx.empty 1 KiB": _median_us(lambda: ctx.empty(1024, dtype=torch.uint8)),
            "ctx.empty 1 MiB": _median_us(lambda: ctx.empty(1 << 20, dtype=torch.uint8))}
    rows.update({name: _median_us(fn) for name, fn in calls.items()})
    rows["dist.all_reduce, gloo (real)"] = _median_us(lambda: dist.all_reduce(plain))
    return rows


if __name__ == "__main__":
    for name, us in iris.run(main, 1)[0].items():
        print(f"{name:<34} {us:8.2f} us")
