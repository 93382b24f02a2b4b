"""The benchmark harness: declarative sweeps (axes x providers), every point timed the same way, one schema.

    sweep = Sweep("p2p", axes={"op": ("load", "store"), "bytes": (1 << 20, 1 << 30)},
                  providers=("iris", "copy_engine"), make=make_point)
    rows = run_sweep(ctx, sweep)             # collective: every rank calls it, every rank gets the rows

``make(provider, **point)`` runs on every rank and returns a ``Point``: the calls this rank makes (``None``
when it sits the point out) and the bytes/FLOPs they move, or ``None`` to skip the point everywhere
(it must decide the same on every rank).

How a point is timed (the same for every provider, so the columns compare):

1. warm-up calls (compilation, first-touch, peer mappings) on the ranks that take part, then
   ``Point.check`` on every rank if given (results are checked before they are timed);
2. one timed call on each rank after a host barrier gives the per-call estimate; the ranks agree on the
   largest;
3. calls shorter than ``Timing.graph_below_ms`` are timed in batches: on GPUs a CUDA graph of ``batch``
   back-to-back calls, replayed (launch overhead is paid once per replay; the batch is refined once
   from a replay); on the cpu backend, or when capture fails, an eager loop;
4. ``repeat`` samples, each after a host barrier (and an L2 flush if asked), timed with CUDA events
   around the call or replay (host clock on the cpu backend); on GPUs a sleep kernel follows the barrier
   (~1 ms, or three times the host's time to enqueue the call if longer) so that the host's launch overhead
   falls outside the events, then a device barrier so that the ranks start together; repeats shrink at
   large sizes to fit ``Timing.budget_ms``;
5. each rank takes p20/p50/p80 of its samples; the headline is the largest median over the ranks that
   took part, reported with that rank's p20 and p80.

With ``Timing.rounds`` > 1 the providers of one axis point take turns: each is prepared (steps 1-3) once,
then sampled ``repeat`` times per round, ``rounds`` rounds in a rotated order, and its row pools the samples.
Whatever drifts over a sweep (clocks, temperature, the other rank's state) then falls on every provider
alike instead of on whichever ran last.

``Point.fns`` may hold several calls that do the same work on different buffers; the harness cycles
through them, so that repeated calls do not find their data in the L2 cache.
"""

import itertools
import math
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from iris.host.timing import do_bench
from iris.bench.report import SCHEMA, environment, format_bytes
from iris.host.distributed import all_gather_object


@dataclass(frozen=True)
class Timing:
    """How each point is timed; the same on every rank."""

    warmup: int = 3
    repeat: int = 20  # samples at most
    min_repeat: int = 5  # samples at least, whatever the budget
    budget_ms: float = 100.0  # aim for this much timed work per point
    graph_below_ms: float = 0.5  # batch calls shorter than this
    batch_ms: float = 2.0  # one batch (graph replay) at least this long
    max_batch: int = 256
    use_graphs: bool = True
    flush_l2: bool = False  # zero a buffer twice the L2 size before each sample (outside the timed region)
    rounds: int = 1  # > 1: the providers of one point take turns, this many rounds (see the module docstring)

    def __post_init__(self):
        for name in ("warmup", "repeat", "min_repeat", "max_batch", "rounds"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < (0 if name == "warmup" else 1):
                raise ValueError(f"Timing: {name}={value!r} must be an integer >= {0 if name == 'warmup' else 1}")
        if self.min_repeat > self.repeat:
            raise ValueError(f"Timing: min_repeat={self.min_repeat} exceeds repeat={self.repeat}")
        for name in ("budget_ms", "graph_below_ms", "batch_ms"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"Timing: {name}={getattr(self, name)!r} must be >= 0")


@dataclass
class Point:
    """One measurement as seen by one rank."""

    fns: Sequence[Callable[[], None]] | None  # the same work on rotated buffers; None: this rank idles
    bytes: int  # bytes one call moves; algbw_GBps = bytes / time
    dtype: str = ""
    shape: tuple = ()
    variant: str = ""  # what else distinguishes the point (pair of ranks, memory order, ...)
    busbw_factor: float = 1.0  # busbw_GBps = algbw_GBps * busbw_factor (nccl-tests conventions)
    flops: float = 0.0  # FLOPs one call performs; tflops is left empty when 0
    ops_per_call: int = 1  # the reported time is per op: call time / ops_per_call
    graph: bool = True  # may be captured in a CUDA graph
    check: Callable[[], None] | None = None  # run on every rank after the warm-up (and a barrier); raise if wrong

    def __post_init__(self):
        if self.fns is not None and (not self.fns or not all(callable(f) for f in self.fns)):
            raise ValueError("Point: fns must be None or a non-empty sequence of callables")
        if self.bytes < 0 or self.ops_per_call < 1:
            raise ValueError(f"Point: bytes={self.bytes} must be >= 0 and ops_per_call={self.ops_per_call} >= 1")


@dataclass(frozen=True)
class Sweep:
    """Every combination of ``axes`` values, for every provider. An axis named ``op`` names the operation in
    the results (else the sweep's ``name`` does); an axis named ``bytes`` is shown as a size."""

    name: str
    axes: dict
    providers: tuple
    make: Callable[..., Point | None]
    timing: Timing = field(default_factory=Timing)

    def points(self):
        names = list(self.axes)
        for values in itertools.product(*(self.axes[name] for name in names)):
            for provider in self.providers:
                yield provider, dict(zip(names, values))


class _Cycle:
    """Calls ``fns`` in turn, one per call."""

    def __init__(self, fns):
        self.fns = list(fns)
        self.i = 0

    def __call__(self):
        self.fns[self.i % len(self.fns)]()
        self.i += 1


def _nothing():
    pass


class _Progress:
    """One status line on rank 0's stderr: rewritten in place on a terminal, else a line every 10 s."""

    def __init__(self, enabled, name, total):
        self.enabled, self.name, self.total = enabled, name, total
        self.tty = enabled and sys.stderr.isatty()
        self.last = 0.0
        self.start = time.monotonic()

    def update(self, i, provider, point):
        if not self.enabled:
            return
        now = time.monotonic()
        if not self.tty and now - self.last < 10 and i + 1 < self.total:
            return
        self.last = now
        what = " ".join(format_bytes(v) if k == "bytes" else str(v) for k, v in point.items())
        line = f"[bench] {self.name} {i + 1}/{self.total} {what} {provider} ({now - self.start:.0f} s)"
        sys.stderr.write(f"\r{line:<100}" if self.tty else line + "\n")
        sys.stderr.flush()

    def result(self, row):
        """One line per measured point on stdout, so a log keeps what was measured even if the run is cut."""
        if self.enabled:
            print(f"[row] {row['op']} {row['shape']} {row['provider']}: {row['ms_p50']:.4f} ms", flush=True)

    def close(self):
        if self.tty:
            sys.stderr.write("\n")
            sys.stderr.flush()


def run_sweep(ctx, sweep, progress=True):
    """Collective. Measure every point of ``sweep``; returns the result rows (dicts with the ``SCHEMA``
    columns), the same list on every rank. Shows a progress line on rank 0 when ``progress``."""
    env = all_gather_object(environment(ctx.get_device()))[0]  # rank 0's: ranks started apart differ in date
    points = list(sweep.points())
    bar = _Progress(progress and ctx.get_rank() == 0, sweep.name, len(points))
    rows = []
    if sweep.timing.rounds == 1:
        for i, (provider, params) in enumerate(points):
            bar.update(i, provider, params)
            point = sweep.make(provider, **params)
            if point is None:
                continue
            stats = measure(ctx, point, sweep.timing)
            rows.append(_row(ctx, sweep, provider, params, point, stats, env))
            bar.result(rows[-1])
        bar.close()
        return rows
    for i in range(0, len(points), len(sweep.providers)):  # points() yields every provider of one point in turn
        params = points[i][1]
        made = []
        for j, provider in enumerate(sweep.providers):
            bar.update(i + j, provider, params)
            point = sweep.make(provider, **params)
            if point is not None:
                made.append((provider, point, _Prepared(ctx, point, sweep.timing)))
        samples = {provider: [] for provider, _, _ in made}
        for r in range(sweep.timing.rounds if made else 0):  # a point every provider skips takes no turns
            shift = r % len(made)
            for provider, _, prepared in made[shift:] + made[:shift]:
                samples[provider] += prepared.sample(ctx) or []
        for provider, point, prepared in made:
            rows.append(_row(ctx, sweep, provider, params, point, prepared.summary(ctx, samples[provider]), env))
            bar.result(rows[-1])
    bar.close()
    return rows


def measure(ctx, point, timing=Timing()):
    """Collective. Time ``point`` on every rank; returns ``{"ms_p20", "ms_p50", "ms_p80", "timing"}`` (per op,
    milliseconds) for the rank with the largest median."""
    prepared = _Prepared(ctx, point, timing)
    return prepared.summary(ctx, prepared.sample(ctx))


class _Prepared:
    """A point warmed up, checked, and made into what one sample times (a call, or a batch of calls)."""

    def __init__(self, ctx, point, timing):
        self.point, self.timing = point, timing
        self.active = active = point.fns is not None
        call = _Cycle(point.fns) if active else _nothing
        cuda = ctx.get_device().type == "cuda"
        for _ in range(timing.warmup if active else 0):
            call()
        if point.check is not None:
            ctx.barrier()
            point.check()
        estimate = _agree_estimate(ctx, active, call)  # ms per call, the same number on every rank
        batch, fn, mode = 1, call, "events" if cuda else "host"
        if estimate < timing.graph_below_ms:
            graphs = cuda and point.graph and timing.use_graphs  # decided alike on every rank
            batch = _batch_size(estimate, timing)
            fn, mode = _batched(call, batch, graphs and active)
            if graphs:
                # One short call timed alone is noisy (clocks ramping, launch jitter); a replay of the batch is not.
                estimate = _agree_estimate(ctx, active, fn) / batch
                if estimate * batch < timing.batch_ms / 2 and batch < timing.max_batch:
                    batch = _batch_size(estimate, timing)
                    fn, mode = _batched(call, batch, active)
        self.fn, self.batch = fn, batch
        self.mode = mode if batch == 1 else f"{mode} x{batch}"
        self.repeat = int(min(timing.repeat, max(timing.min_repeat,
                                                 round(timing.budget_ms / max(estimate * batch, 1e-6)))))
        self.preamble = _l2_flusher(ctx.get_device()) if timing.flush_l2 and cuda else _nothing
        self.barrier = barrier_then_idle(ctx, _idle_cycles(active, fn)) if cuda else ctx.barrier

    def sample(self, ctx):
        """Collective. ``repeat`` timed samples, per op (ms); None on a rank that sits the point out."""
        times = do_bench(self.fn if self.active else _nothing, barrier_fn=self.barrier, preamble_fn=self.preamble,
                         n_warmup=1, n_repeat=self.repeat, return_mode="all")
        return [t / (self.batch * self.point.ops_per_call) for t in times] if self.active else None

    def summary(self, ctx, per_op):
        """Collective. The quantiles of this rank's samples, gathered; the rank with the largest median's."""
        mine = None
        if self.active:
            per_op = sorted(per_op)
            mine = {"ms_p20": _quantile(per_op, 0.2), "ms_p50": statistics.median(per_op),
                    "ms_p80": _quantile(per_op, 0.8), "timing": self.mode}
        taken = [s for s in all_gather_object(mine) if s is not None]
        if not taken:
            raise ValueError("measure: no rank took part in this point (every rank's Point.fns is None)")
        return max(taken, key=lambda s: s["ms_p50"])


# ~1 ms at the H200's 1.98 GHz: longer than the host takes to enqueue the device barrier and any call we
# time (a Triton launch from Python is 20-50 us, a fan-out of copies over 7 streams ~150 us, a fused op's
# checks and launches more), so the start event is still queued behind the sleep when the work is enqueued.
# At 250 us, calls with the longest host path (fused ops, PyTorch's fused ops) read up to 40% slow and
# scattered on some hosts, while cuBLAS + NCCL did not (docs/perf-notes.md). A point whose call takes the host
# longer sleeps longer (``_idle_cycles``), up to MAX_IDLE_CYCLES (~50 ms).
IDLE_CYCLES = 2_000_000
MAX_IDLE_CYCLES = 100_000_000
SM_CLOCK_HZ = 1.98e9  # the H200's top SM clock: n cycles of sleep last at least n / SM_CLOCK_HZ seconds


def _idle_cycles(active, fn):
    """Sleep cycles that cover three times the host's time to enqueue one ``fn`` on an idle GPU (measured here,
    once per point), and at least IDLE_CYCLES."""
    if not active:
        return IDLE_CYCLES
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    host_s = time.perf_counter() - start
    torch.cuda.synchronize()
    return int(min(MAX_IDLE_CYCLES, max(IDLE_CYCLES, 3 * host_s * SM_CLOCK_HZ)))


def barrier_then_idle(ctx, cycles=IDLE_CYCLES):
    """The barrier before a timed sample. On GPUs a host barrier, a short sleep kernel, then a device barrier:
    the GPU waits while the host records the start event and launches the timed work, so the sample measures the
    GPU's time, not the host's launch overhead; the device barrier then starts every rank's timed region within
    a few microseconds of the others. Without it the ranks leave the host barrier tens of microseconds apart,
    and a collective timed alone counted that skew as its own: reduce_scatter at 256 MiB read 301 GB/s timed
    call by call against 341 GB/s in batches of 5 (docs/perf-notes.md). Elsewhere the host barrier alone."""
    if ctx.get_device().type != "cuda":
        return ctx.barrier
    sleep = getattr(torch.cuda, "_sleep", None)

    def barrier():
        ctx.barrier()
        if sleep is not None:
            sleep(cycles)
        ctx.device_barrier()
    return barrier


def _agree_estimate(ctx, active, fn):
    """One call timed on each rank after a barrier; the largest over the ranks that took part (ms)."""
    mine = do_bench(fn if active else _nothing, barrier_fn=barrier_then_idle(ctx), n_warmup=0, n_repeat=1,
                    return_mode="min")
    taken = [t for t in all_gather_object(mine if active else None) if t is not None]
    return max(taken) if taken else 0.0


def _batch_size(estimate_ms, timing):
    return int(min(timing.max_batch, max(2, math.ceil(timing.batch_ms / max(estimate_ms, 1e-4)))))


def _batched(call, batch, try_graph):
    """``batch`` calls as one: a CUDA graph replay when ``try_graph`` and capture works, else an eager loop."""
    def loop():
        for _ in range(batch):
            call()

    if not try_graph:
        return loop, "loop"
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            loop()
    except Exception as e:  # a provider that cannot be captured is timed eagerly, and says so in `timing`
        print(f"[bench] CUDA graph capture failed ({type(e).__name__}: {e}); timing an eager loop", file=sys.stderr)
        torch.cuda.synchronize()
        return loop, "loop"
    return graph.replay, "graph"


_FLUSH = {}


def _l2_flusher(device):
    if device not in _FLUSH:
        l2 = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 64 << 20)
        _FLUSH[device] = torch.empty(2 * l2, dtype=torch.uint8, device=device)
    buffer = _FLUSH[device]
    return buffer.zero_


def _quantile(ordered, q):
    position = q * (len(ordered) - 1)
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _row(ctx, sweep, provider, params, point, stats, env):
    ms = stats["ms_p50"]
    algbw = point.bytes / (ms * 1e-3) / 1e9 if ms > 0 else float("nan")
    row = {
        "op": params.get("op", sweep.name),
        "provider": provider,
        "variant": point.variant,
        "world_size": ctx.get_num_ranks(),
        "dtype": point.dtype,
        "shape": "x".join(str(d) for d in point.shape),
        "bytes": int(point.bytes),
        "ms_p20": stats["ms_p20"],
        "ms_p50": ms,
        "ms_p80": stats["ms_p80"],
        "algbw_GBps": algbw,
        "busbw_GBps": algbw * point.busbw_factor,
        "tflops": point.flops / (ms * 1e-3) / 1e12 if point.flops else None,
        "timing": stats["timing"],
        "gpu": env["gpu"],
        "commit": env["commit"],
        "date": env["date"],
    }
    assert tuple(row) == SCHEMA, "harness and report disagree on the result schema"
    return row


def spin_up(device, seconds=1.0):
    """Keep the GPU busy with GEMMs for ``seconds`` before the first measurement: without it the first
    point timed reads up to 19% slower than the same kernel timed later, the clocks still ramping."""
    x = torch.randn(4096, 4096, device=device, dtype=torch.bfloat16)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for _ in range(20):
            x = torch.matmul(x, x).mul_(1e-3)
        torch.cuda.synchronize(device)
