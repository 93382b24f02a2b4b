"""Results: the one schema, the console table, CSV/JSON files, and plots (matplotlib, imported lazily).

Every benchmark writes rows with the columns of ``SCHEMA`` (long format: one row per op x provider x
point). Bandwidths are decimal GB/s (1e9 bytes per second), the unit of NVLink datasheets. ``timing`` says
how the point was timed: ``events`` (CUDA events around each call), ``graph xN`` (replays of a CUDA graph
of N calls), ``loop xN`` (N eager calls), ``host`` (host clock, cpu backend).
"""

import csv
import datetime
import json
import math
import os
import platform
import subprocess
import sys

SCHEMA = ("op", "provider", "variant", "world_size", "dtype", "shape", "bytes", "ms_p20", "ms_p50", "ms_p80",
          "algbw_GBps", "busbw_GBps", "tflops", "timing", "gpu", "commit", "date")
MEASURED = ("ms_p20", "ms_p50", "ms_p80", "algbw_GBps", "busbw_GBps")  # positive and finite in every row

_ENV = {}


def environment(device=None):
    """Where and when: GPU name, commit, date, versions and the command line; computed once per process."""
    key = str(device)
    if key not in _ENV:
        import torch
        import triton

        if device is not None and getattr(device, "type", "cpu") == "cuda":
            gpu = torch.cuda.get_device_name(device)
        else:
            gpu = f"cpu ({platform.machine()}, Triton interpreter)"
        _ENV[key] = {
            "gpu": gpu, "commit": _commit(), "torch": torch.__version__, "triton": triton.__version__,
            "python": platform.python_version(),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        }
    return _ENV[key]


def _commit():
    """``IRIS_BENCH_COMMIT`` or ``IRIS_COMMIT`` if set (scripts/gpu_tier.sh sets the latter where the tree
    travels without .git), else ``git describe --always --dirty`` of the source tree, else "unknown"."""
    for name in ("IRIS_BENCH_COMMIT", "IRIS_COMMIT"):
        if os.environ.get(name):
            return os.environ[name]
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        out = subprocess.run(["git", "describe", "--always", "--dirty"], cwd=here, capture_output=True, text=True,
                             timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else "unknown"


def format_bytes(n):
    n = int(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n} {unit}" if unit == "B" else f"{n:g} {unit}"
        if n % 1024:
            return f"{n / 1024:.1f} {_next(unit)}"
        n //= 1024


def _next(unit):
    return {"B": "KiB", "KiB": "MiB", "MiB": "GiB", "GiB": "TiB"}[unit]


def _cell(column, value):
    if value is None or value == "":
        return "-"
    if column == "bytes":
        return format_bytes(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        if column.startswith("ms_"):
            return f"{value:.4f}"
        return f"{value:.1f}" if abs(value) >= 10 else f"{value:.3g}"
    return str(value)


DEFAULT_COLUMNS = ("op", "provider", "variant", "bytes", "ms_p50", "ms_p20", "ms_p80", "busbw_GBps", "timing")


def format_table(rows, columns=DEFAULT_COLUMNS, title=None):
    """A plain-text table of ``rows`` (dicts); numbers right-aligned."""
    cells = [[_cell(c, row.get(c)) for c in columns] for row in rows]
    widths = [max([len(c)] + [len(r[i]) for r in cells]) for i, c in enumerate(columns)]
    numeric = [all(_numeric(row.get(c)) for row in rows) for c in columns]

    def line(values):
        return "  ".join(v.rjust(w) if num else v.ljust(w) for v, w, num in zip(values, widths, numeric)).rstrip()

    out = [title] if title else []
    out += [line(columns), line(["-" * w for w in widths])] + [line(r) for r in cells]
    return "\n".join(out)


def _numeric(value):
    return value is None or isinstance(value, (int, float)) and not isinstance(value, bool)


def markdown_table(header, body):
    """A GitHub-flavoured markdown table from a header list and rows of cells."""
    lines = ["| " + " | ".join(str(h) for h in header) + " |", "|" + " --- |" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in body]
    return "\n".join(lines)


def write_csv(rows, path):
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=SCHEMA, extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if row.get(k) is None else row.get(k)) for k in SCHEMA})
    return path


def write_json(rows, path):
    """A JSON list, one record a line: a sweep's file as many lines as its CSV (indented, each of the 18-field
    records would take 20 lines)."""
    with open(path, "w") as f:
        f.write("[\n" + ",\n".join(json.dumps({k: row.get(k) for k in SCHEMA}) for row in rows) + "\n]\n")
    return path


def write_results(rows, directory, stem):
    """``<stem>.csv`` and ``<stem>.json`` in ``directory``; returns their paths."""
    os.makedirs(directory, exist_ok=True)
    return [write_csv(rows, os.path.join(directory, f"{stem}.csv")),
            write_json(rows, os.path.join(directory, f"{stem}.json"))]


# ---------------------------------------------------------------------------------------------- plots
def _pyplot(path):
    """matplotlib's pyplot on the Agg backend, or None (and a message) when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"[bench] matplotlib is not installed: skipping {os.path.basename(path)} (pip install matplotlib)",
              file=sys.stderr)
        return None
    return plt


def _panel_grid(path, count, cols, panel_size):
    """(plt, fig, axes) for ``count`` panels, ``cols`` to a row, each ``panel_size`` inches; None when
    matplotlib is missing."""
    plt = _pyplot(path)
    if plt is None:
        return None
    cols = min(count, cols)
    fig_rows = math.ceil(count / cols)
    fig, axes = plt.subplots(fig_rows, cols, figsize=(panel_size[0] * cols, panel_size[1] * fig_rows),
                             squeeze=False)
    return plt, fig, axes


def _save_grid(plt, fig, axes, used, title, path):
    """Blank the panels past ``used``, title, write ``path`` and return it."""
    for ax in list(axes.flat)[used:]:
        ax.axis("off")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_curves(rows, path, ops, y="busbw_GBps", title="", peak_GBps=None, peak_label=None):
    """One panel per op: ``y`` against bytes (log scale), one line per provider (and variant). Returns the
    path written, or None when matplotlib is missing or there is nothing to plot."""
    ops = [op for op in ops if any(r["op"] == op for r in rows)]
    grid = _panel_grid(path, len(ops), 4, (4.2, 3.4)) if ops else None
    if grid is None:
        return None
    plt, fig, axes = grid
    for ax, op in zip(axes.flat, ops):
        mine = [r for r in rows if r["op"] == op]
        # Name lines by provider alone unless a provider has several variants in this panel.
        several = len({(r["provider"], r["variant"]) for r in mine}) > len({r["provider"] for r in mine})
        series = {}
        for r in mine:
            label = r["provider"] + (f" {r['variant']}" if several and r["variant"] else "")
            series.setdefault(label, []).append((r["bytes"], r[y]))
        for label, points in sorted(series.items()):
            points.sort()
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", markersize=3, label=label)
        if peak_GBps:
            ax.axhline(peak_GBps, color="gray", linestyle="--", linewidth=1, label=peak_label or "peak")
        ax.set_xscale("log", base=2)
        ticks = sorted({r["bytes"] for r in mine})
        ax.set_xticks(ticks, [format_bytes(t) for t in ticks], rotation=45, ha="right", fontsize=7)
        ax.minorticks_off()
        ax.set_title(op)
        ax.set_xlabel("bytes per rank")
        ax.set_ylabel(y.replace("_GBps", " (GB/s)"))
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    return _save_grid(plt, fig, axes, len(ops), title, path)


def plot_bars(panels, path, ylabel, title="", reference=None):
    """Grouped bars: ``panels`` maps a panel title to {group label: {series label: value}} (one panel per op,
    one group per shape, one bar per provider); ``reference`` draws a dashed line at that value (1.0 for a
    speedup). Returns the path written, or None when matplotlib is missing or there is nothing to plot."""
    panels = {name: groups for name, groups in panels.items() if groups}
    grid = _panel_grid(path, len(panels), 2, (6.4, 3.6)) if panels else None
    if grid is None:
        return None
    plt, fig, axes = grid
    colors = {label: f"C{i}" for i, label in enumerate(dict.fromkeys(
        label for groups in panels.values() for bars in groups.values() for label in bars))}  # same in every panel
    for ax, (name, groups) in zip(axes.flat, panels.items()):
        series = [label for label in colors if any(label in bars for bars in groups.values())]
        width = 0.8 / len(series)
        for i, label in enumerate(series):
            xs = [g + (i - (len(series) - 1) / 2) * width for g in range(len(groups))]
            values = [bars.get(label, float("nan")) for bars in groups.values()]
            drawn = ax.bar(xs, values, width, label=label, color=colors[label])
            ax.bar_label(drawn, fmt="%.2f", fontsize=6, rotation=90, padding=2)
        if reference is not None:
            ax.axhline(reference, color="gray", linestyle="--", linewidth=1)
        ax.set_xticks(range(len(groups)), list(groups), fontsize=8)
        ax.set_title(name)
        ax.set_ylabel(ylabel)
        ax.margins(y=0.2)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=7, ncol=2)
    return _save_grid(plt, fig, axes, len(panels), title, path)


def plot_heatmap(rows, path, ops, provider, peak_GBps, title=""):
    """Utilisation (busbw / ``peak_GBps``) of ``provider`` over op x size, annotated in percent, like the
    paper's figure. Returns the path written, or None."""
    ops = [op for op in ops if any(r["op"] == op and r["provider"] == provider for r in rows)]
    if not ops or not peak_GBps:
        return None
    sizes = sorted({r["bytes"] for r in rows if r["op"] in ops and r["provider"] == provider})
    plt = _pyplot(path)
    if plt is None:
        return None
    grid = [[float("nan")] * len(sizes) for _ in ops]
    for r in rows:
        if r["provider"] == provider and r["op"] in ops:
            value = 100.0 * r["busbw_GBps"] / peak_GBps
            i, j = ops.index(r["op"]), sizes.index(r["bytes"])
            grid[i][j] = value if math.isnan(grid[i][j]) else max(grid[i][j], value)
    fig, ax = plt.subplots(figsize=(1.0 + 0.75 * len(sizes), 1.2 + 0.5 * len(ops)))
    image = ax.imshow(grid, cmap="viridis", vmin=0, vmax=100, aspect="auto")
    for i in range(len(ops)):
        for j in range(len(sizes)):
            if not math.isnan(grid[i][j]):
                ax.text(j, i, f"{grid[i][j]:.0f}", ha="center", va="center", fontsize=7,
                        color="white" if grid[i][j] < 60 else "black")
    ax.set_xticks(range(len(sizes)), [format_bytes(s) for s in sizes], rotation=45, ha="right", fontsize=7)
    ax.set_yticks(range(len(ops)), ops, fontsize=8)
    fig.colorbar(image, ax=ax, label=f"% of {peak_GBps:.0f} GB/s")
    ax.set_title(title or f"{provider}: utilisation", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_trace(trace_path, path, lanes_per_rank=12, align_ranks=False):
    """A timeline PNG of a ``ctx.tracing.export`` file: one band per rank, one lane per SM (the first
    ``lanes_per_rank`` SMs that recorded anything), GEMM tiles and transfers in two colours. ``align_ranks``
    lines the ranks up on the median SM's first event (for kernels that open with a cross-rank barrier). Returns
    the path written, or None when matplotlib is missing."""
    with open(trace_path) as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    if not events:
        return None
    starts = {}  # rank -> SM -> first event
    for e in events:
        sms = starts.setdefault(e["pid"], {})
        sms[e["tid"]] = min(sms.get(e["tid"], e["ts"]), e["ts"])
    first = {rank: sorted(sms.values())[len(sms) // 2] for rank, sms in starts.items()}
    start = min(min(sms.values()) for sms in starts.values())
    events = [dict(e, ts=e["ts"] - (first[e["pid"]] if align_ranks else start)) for e in events]
    plt = _pyplot(path)
    if plt is None:
        return None
    colours = {"gemm tile": "#4C72B0", "scatter tile": "#DD8452"}
    ranks = sorted({e["pid"] for e in events})
    fig, ax = plt.subplots(figsize=(12, 1.2 + 0.28 * lanes_per_rank * len(ranks)))
    ticks, labels, y = [], [], 0
    for rank in ranks:
        mine = [e for e in events if e["pid"] == rank]
        for tid in sorted({e["tid"] for e in mine})[:lanes_per_rank]:
            for e in (e for e in mine if e["tid"] == tid):
                ax.barh(y, e["dur"], left=e["ts"], height=0.8, color=colours.get(e["name"], "#888888"))
            ticks.append(y)
            labels.append(f"rank {rank} · SM {tid}")
            y += 1
        y += 1  # a gap between ranks
    ax.set_yticks(ticks, labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel(("time since the rank's median first event" if align_ranks else "time since the first event") +
                  " (us on GPUs; event order on the cpu backend)")
    ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=c) for c in colours.values()], labels=list(colours),
              loc="upper right", fontsize=8)
    ax.set_title(os.path.basename(trace_path))
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return path
