"""The microbenchmark suite as one command: start the ranks, run the sweeps, write files and a summary.

``benchmarks/run_all.py`` runs every part; ``benchmarks/p2p_bandwidth.py``, ``all_load_store.py`` and
``atomics.py`` run one part each. All of them call ``cli``. Files written to ``--out DIR`` (rank 0):
``<stem>.csv`` / ``<stem>.json`` (every row, ``iris.bench.report.SCHEMA``), ``<stem>.md`` (headline tables,
matrices, the copy-kernel tuning, versions and the exact command) and PNG figures when matplotlib is there.
"""

import argparse
import os
import shlex
import sys
import time

from iris.bench import kernels, micro, report

PARTS = ("p2p", "all", "atomics", "latency")
NVLINK_GBPS = 450.0  # H100/H200 NVLink 4, 18 links: datasheet rate per direction
TARGET_OF_CE, TARGET_OF_RAW, TARGET_ATOMIC_OF_STORE, TARGET_ONE_WAY_US = 0.95, 1.00, 0.90, 2.0


def cli(parts=PARTS, stem="microbench", description=__doc__, argv=None):
    """Parse the command line and run ``parts`` on every rank: under torchrun in this process, otherwise on
    ``--world-size`` (default: every GPU, or 2 on the cpu backend) ranks started with ``iris.run``."""
    from iris.host import launcher

    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="directory for the CSV/JSON/markdown/PNG files")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (the cpu-backend check): meaningless numbers")
    parser.add_argument("--parts", default=",".join(parts), help=f"comma-separated subset of {','.join(parts)}")
    parser.add_argument("--world-size", type=int, default=None, help="ranks to start (default: every GPU)")
    parser.add_argument("--max-bytes", type=int, default=None, help="drop sizes above this many bytes")
    parser.add_argument("--no-tune", action="store_true", help="skip the copy-kernel shape sweep (use defaults)")
    parser.add_argument("--peak", type=float, default=None,
                        help="GB/s that the heatmap calls 100%% (default: the copy engine's best in this run)")
    args = parser.parse_args(argv)
    chosen = tuple(p for p in args.parts.split(",") if p)
    unknown = [p for p in chosen if p not in PARTS]
    if unknown:
        parser.error(f"--parts: unknown part(s) {unknown}; choose from {PARTS}")
    world_size = args.world_size or default_world_size()
    if world_size < 2:
        parser.error(f"the microbenchmarks need at least 2 ranks, found {world_size} GPU(s); on one GPU run "
                     "IRIS_BACKEND=simulation with --world-size 2")
    command = shlex.join([os.path.basename(sys.executable)] + sys.argv) if argv is None else shlex.join(argv)
    options = dict(out=args.out, quick=args.quick, parts=chosen, stem=stem, tune=not args.no_tune, peak=args.peak,
                   max_bytes=args.max_bytes, command=command)
    for text in launcher.run(run_suite, world_size, **options):
        if text:
            print(text)


def default_world_size():
    """Every GPU on the cuda backend; 2 ranks on the cpu backend."""
    from iris.platform import backend

    if backend.BACKEND == "cpu":
        return 2
    import torch

    return torch.cuda.device_count()


def profile_for(quick, max_bytes=None):
    profile = micro.QUICK if quick else micro.FULL
    if max_bytes:
        def keep(sizes):
            return tuple(s for s in sizes if s <= max_bytes) or (min(sizes),)

        sizes, atomic_sizes = keep(profile.sizes), keep(profile.atomic_sizes)
        profile = micro.Profile(sizes=sizes, matrix_bytes=min(profile.matrix_bytes, max(sizes)),
                                atomic_sizes=atomic_sizes, pingpong_rounds=profile.pingpong_rounds,
                                timing=profile.timing, rotate_bytes=profile.rotate_bytes, dtype=profile.dtype)
    return profile


def run_suite(out, quick=False, parts=PARTS, stem="microbench", tune=True, peak=None, max_bytes=None, command=""):
    """Collective (every rank). Run ``parts``, write the files on rank 0; returns the summary text on rank 0
    and "" elsewhere."""
    from iris.iris import iris

    start = time.monotonic()
    profile = profile_for(quick, max_bytes)
    ctx = iris(heap_size=profile.heap_bytes(_world_size()))
    bufs = micro.Buffers(ctx, profile)
    rows, tuning = [], []
    if tune and ("p2p" in parts or "all" in parts or "atomics" in parts):
        candidates = micro.TUNE_CANDIDATES[:2] if quick else micro.TUNE_CANDIDATES
        tuning = micro.tune_copy(bufs, candidates, nbytes=profile.matrix_bytes)
    if "p2p" in parts:
        rows += micro.p2p_curve(bufs)
        skip = ((0, 1),) if profile.matrix_bytes in profile.sizes else ()
        rows += micro.p2p_matrix(bufs, skip=skip)
    if "atomics" in parts:
        if "p2p" not in parts:  # the store bandwidth that the atomics are compared with
            rows += micro.p2p_curve(bufs, ops=("store",), providers=("iris",), sizes=profile.atomic_sizes)
        rows += micro.atomic_sweep(bufs)
    if "all" in parts:
        rows += micro.all_sweep(bufs)
    if "latency" in parts:
        rows += micro.pingpong_sweep(bufs)
    text = ""
    if ctx.get_rank() == 0:
        elapsed = time.monotonic() - start
        text = write_outputs(rows, tuning, bufs, out, stem, peak, command, elapsed)
    ctx.barrier()
    ctx.close()
    return text


def _world_size():
    return int(os.environ.get("WORLD_SIZE", "1"))


# ---------------------------------------------------------------------------------------------- summary
def _pick(rows, op, provider, nbytes, pair="0->1"):
    for r in rows:
        if r["op"] == op and r["provider"] == provider and r["bytes"] == nbytes and r["variant"].startswith(pair):
            return r
    return None


def _bw(row):
    return row["busbw_GBps"] if row else None


def _gbps(value):
    return "-" if value is None else f"{value:.1f}" if value >= 10 else f"{value:.3g}"


def _pct(a, b):
    return "-" if a is None or not b else f"{100.0 * a / b:.1f}%"


def bandwidth_table(rows, p2p_bytes, all_buffer_bytes, world_size):
    """Headline rows: p2p ops (pair 0->1) at ``p2p_bytes``; all-load/all-store with ``all_buffer_bytes`` per
    rank (their rows count the bytes of all peers)."""
    header = ["op", "size", "iris GB/s", "copy_engine GB/s", "triton_raw GB/s", "torch_dist GB/s", "% of CE",
              "% of raw", "% of torch_dist", "target"]
    body = []
    for op in kernels.P2P_OPS + ("all_load", "all_store"):
        p2p = op in kernels.P2P_OPS
        nbytes, pair = (p2p_bytes, "0->1") if p2p else (all_buffer_bytes * (world_size - 1), "")
        iris_, ce, raw, td = (_bw(_pick(rows, op, p, nbytes, pair)) for p in
                              ("iris", "copy_engine", "triton_raw", "torch_dist"))
        if iris_ is None:
            continue
        target = "-"
        if p2p and ce and raw:
            met = iris_ >= TARGET_OF_CE * ce and iris_ >= TARGET_OF_RAW * raw
            target = "met" if met else "missed"
        size = report.format_bytes(p2p_bytes if p2p else all_buffer_bytes)
        body.append([op, size, _gbps(iris_), _gbps(ce), _gbps(raw), _gbps(td), _pct(iris_, ce), _pct(iris_, raw),
                     _pct(iris_, td), target])
    return header, body


def atomics_table(rows, nbytes):
    header = ["op", "size", "iris GB/s", "triton_raw GB/s", "iris store GB/s", "% of store", "Mops/s", "target"]
    store = _bw(_pick(rows, "store", "iris", nbytes))
    body = []
    for op in micro.ATOMIC_DTYPES:
        iris_, raw = _bw(_pick(rows, op, "iris", nbytes)), _bw(_pick(rows, op, "triton_raw", nbytes))
        if iris_ is None:
            continue
        target = "-" if not store else "met" if iris_ >= TARGET_ATOMIC_OF_STORE * store else "missed"
        body.append([op, report.format_bytes(nbytes), _gbps(iris_), _gbps(raw), _gbps(store), _pct(iris_, store),
                     f"{iris_ * 1e3 / 4:.0f}", target])
    return header, body


def latency_table(rows):
    header = ["provider", "order", "one-way us (p50)", "p20", "p80", "target"]
    body = []
    for r in rows:
        if r["op"] == "flag_pingpong":
            us = 1e3 * r["ms_p50"]
            body.append([r["provider"], r["variant"].split()[0], f"{us:.2f}", f"{1e3 * r['ms_p20']:.2f}",
                         f"{1e3 * r['ms_p80']:.2f}", "met" if us < TARGET_ONE_WAY_US else "missed"])
    return header, body


def matrix_tables(rows, nbytes, world_size):
    """Per p2p op: row = initiator, column = peer, cell = "iris / copy_engine / triton_raw" GB/s."""
    out = []
    for op in kernels.P2P_OPS:
        body = []
        for a in range(world_size):
            cells = [f"rank {a}"]
            for b in range(world_size):
                values = [_bw(_pick(rows, op, p, nbytes, f"{a}->{b}")) for p in ("iris", "copy_engine", "triton_raw")]
                cells.append("-" if a == b or values[0] is None else " / ".join(_gbps(v) for v in values))
            body.append(cells)
        if any(c != "-" for row in body for c in row[1:]):
            out.append((op, ["initiator \\ peer"] + [f"rank {b}" for b in range(world_size)], body))
    return out


def _text_table(header, body):
    return report.format_table([dict(zip(header, row)) for row in body], columns=header)


def write_outputs(rows, tuning, bufs, out, stem, peak, command, elapsed):
    """Rank 0: files in ``out`` and the text printed at the end."""
    os.makedirs(out, exist_ok=True)
    report.write_results(rows, out, stem)
    env = report.environment(bufs.ctx.get_device())
    profile, world_size = bufs.profile, bufs.world_size
    p2p_bytes = profile.matrix_bytes
    atomic_bytes = max(profile.atomic_sizes)
    on_gpu = bufs.ctx.get_device().type == "cuda"
    figures = _plots(rows, out, world_size, peak, on_gpu)

    bw = bandwidth_table(rows, p2p_bytes, max(profile.sizes), world_size)
    at, lat = atomics_table(rows, atomic_bytes), latency_table(rows)
    md = [f"# Communication microbenchmarks ({stem})", "",
          f"- date: {env['date']}", f"- GPU: {env['gpu']} x {world_size}",
          f"- torch {env['torch']}, triton {env['triton']}, python {env['python']}, commit {env['commit']}",
          f"- command: `{command}`", f"- wall time: {elapsed:.0f} s",
          f"- copy kernels: pull {micro.describe_config(bufs.pull_config)}; "
          f"push {micro.describe_config(bufs.push_config)}", "",
          "Bandwidth is busbw in decimal GB/s: bytes one GPU moves in one direction / time (median over samples, "
          "largest over ranks). Targets: p2p >= 95% of the copy engine and >= 100% of the raw-pointer Triton "
          "kernel; atomics >= 90% of store at the same bytes; one-way flag latency < 2 us. See "
          "docs/perf-notes.md for the floors and what to check when a number misses.", ""]
    for title, (header, body) in (("Bandwidth (p2p pair 0->1, all-* over all peers)", bw), ("Atomics", at),
                                  ("Flag latency (ping-pong, one way = round trip / 2)", lat)):
        if body:
            md += [f"## {title}", "", report.markdown_table(header, body), ""]
    for op, header, body in matrix_tables(rows, p2p_bytes, world_size):
        md += [f"## {op} matrix at {report.format_bytes(p2p_bytes)} (iris / copy_engine / triton_raw GB/s)", "",
               report.markdown_table(header, body), ""]
    if tuning:
        md += [f"## Copy-kernel shapes tried (iris, pair 0->1, {report.format_bytes(profile.matrix_bytes)})", "",
               report.markdown_table(["op", "config", "GB/s"],
                                     [[r["op"], r["variant"], _gbps(r["busbw_GBps"])] for r in tuning]), ""]
    md += ["## Figures", ""] + [f"![{os.path.basename(f)}]({os.path.basename(f)})" for f in figures]
    with open(os.path.join(out, f"{stem}.md"), "w") as f:
        f.write("\n".join(md) + "\n")

    text = [f"[bench] {len(rows)} points in {elapsed:.0f} s; files in {out}"]
    for header, body in (bw, at, lat):
        if body:
            text += ["", _text_table(header, body)]
    return "\n".join(text)


def _draw(plot, *args, **kwargs):
    """One figure; a failure to draw costs that figure, not the run's results."""
    try:
        return plot(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 (any plotting error: the tables and files are already written)
        print(f"[bench] could not draw {os.path.basename(args[1])}: {type(e).__name__}: {e}", file=sys.stderr)
        return None


def _plots(rows, out, world_size, peak, on_gpu):
    curve = [r for r in rows if r["variant"].startswith("0->1") or "->" not in r["variant"]]
    nvlink = {"peak_GBps": NVLINK_GBPS, "peak_label": "NVLink datasheet"} if on_gpu else {}
    figures = [_draw(report.plot_curves, curve, os.path.join(out, "p2p_curves.png"), kernels.P2P_OPS,
                     title="point-to-point, rank 0 with rank 1", **nvlink),
               _draw(report.plot_curves, curve, os.path.join(out, "all_curves.png"), ("all_load", "all_store"),
                     title=f"all-load / all-store, {world_size} ranks", **nvlink)]
    atomic_ops = tuple(micro.ATOMIC_DTYPES)
    sizes = {r["bytes"] for r in curve if r["op"] in atomic_ops}
    reference = [dict(r, op=op, provider="iris store") for r in curve if r["op"] == "store" and
                 r["provider"] == "iris" and r["bytes"] in sizes for op in atomic_ops]
    figures.append(_draw(report.plot_curves, curve + reference, os.path.join(out, "atomics_curves.png"), atomic_ops,
                         title="remote atomics, rank 0 on rank 1"))
    what = "given peak"
    if peak is None:
        engine = [r for r in curve if r["provider"] == "copy_engine" and r["op"] in kernels.P2P_OPS]
        top = max((r["bytes"] for r in engine), default=None)
        peak = max((r["busbw_GBps"] for r in engine if r["bytes"] == top), default=None)
        what = f"copy engine at {report.format_bytes(top)}" if top else ""
    if peak:
        heat_ops = kernels.P2P_OPS + ("all_load", "all_store") + atomic_ops
        figures.append(_draw(report.plot_heatmap, curve, os.path.join(out, "heatmap.png"), heat_ops, "iris", peak,
                             title=f"iris: % of {peak:.0f} GB/s ({what})"))
    return [f for f in figures if f]
