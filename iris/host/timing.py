"""``iris.do_bench``: time a function on this rank, with optional barrier and preamble around each call. The
benchmark harness (``iris.bench``) builds on it; nothing in the library imports the harness."""

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Literal, get_args

import torch

ReturnMode = Literal["mean", "min", "max", "median", "all"]


def _timer(device_is_cuda):
    if device_is_cuda:
        def start():
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            return event

        def stop(begin):
            end = torch.cuda.Event(enable_timing=True)
            end.record()
            return lambda: begin.elapsed_time(end)
    else:
        def start():
            return time.perf_counter()

        def stop(begin):
            elapsed = (time.perf_counter() - begin) * 1e3
            return lambda: elapsed
    return start, stop


def do_bench(fn: Callable[[], object], barrier_fn: Callable[[], object] = lambda: None,
             preamble_fn: Callable[[], object] = lambda: None, n_warmup: int = 25, n_repeat: int = 100,
             quantiles: Sequence[float] | None = None, return_mode: ReturnMode = "mean") -> float | list[float]:
    """Run ``fn`` ``n_warmup`` times, then time ``n_repeat`` calls, each preceded by ``preamble_fn()`` and
    ``barrier_fn()`` (outside the timed region). Times are milliseconds, from CUDA events on GPUs and the
    host clock on the cpu backend. Returns the ``quantiles`` if given, else the ``return_mode`` statistic
    (``"mean"``, ``"min"``, ``"max"``, ``"median"``, or ``"all"`` for the list). Collective when ``barrier_fn`` is.

    Raises ``ValueError`` for another ``return_mode``.

    Example::

        x = ctx.ones(4096)
        ms = iris.do_bench(lambda: x.mul_(1.0), barrier_fn=ctx.barrier, n_warmup=2, n_repeat=10)
        p50, p90 = iris.do_bench(lambda: x.mul_(1.0), n_warmup=2, n_repeat=10, quantiles=[0.5, 0.9])
        assert ms > 0 and p50 <= p90
    """
    modes = get_args(ReturnMode)
    if return_mode not in modes:
        raise ValueError(f"do_bench: return_mode={return_mode!r}; use one of {modes}")
    cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
    start, stop = _timer(cuda)
    for _ in range(n_warmup):
        preamble_fn()
        fn()
    barrier_fn()
    readers = []
    for _ in range(n_repeat):
        preamble_fn()
        barrier_fn()
        begin = start()
        fn()
        readers.append(stop(begin))
    if cuda:
        torch.cuda.synchronize()
    times = [read() for read in readers]
    barrier_fn()
    if quantiles is not None:
        ordered = torch.tensor(times, dtype=torch.float64)
        return [float(torch.quantile(ordered, q)) for q in quantiles]
    if return_mode == "all":
        return times
    return {"mean": statistics.fmean, "min": min, "max": max, "median": statistics.median}[return_mode](times)
