"""
Performance: reading the results
================================

Every benchmark in ``benchmarks/`` writes its rows to a CSV and a JSON file (one row per operation, provider and
size: the median time, the bandwidth, the commit and the GPU) and draws its figures from them. The latest run of each
is committed under ``results/``, listed in ``results/README.md`` with the command that made it; ``docs/results.md``
says what the figures mean. This tutorial reads the committed collectives run (two H200s on NVLink) and compares
iris with NCCL at each size, as you would read your own run.

To measure on your GPUs: ``python benchmarks/ccl.py --out results-local/ccl`` (a latency and a bus-bandwidth figure
beside the CSV when matplotlib is installed: ``pip install -e ".[bench]"``).
"""

# %%
import csv
import pathlib
import sys
import tempfile

from iris.bench.report import format_bytes, plot_curves

HERE = pathlib.Path(__file__).resolve().parent if "__file__" in globals() else pathlib.Path.cwd()
RUN = HERE.parent / "results" / "2xH200" / "ccl" / "ccl.csv"


# %%
# Each row: ``op``, ``provider`` (``iris``, ``nccl``, ...), ``bytes`` per rank, ``ms_p50`` (the median) and the bus
# bandwidth ``busbw_GBps`` (what the links carried per second, NCCL's convention).
def rows(path=RUN):
    with open(path, newline="") as f:
        found = list(csv.DictReader(f))
    for row in found:
        row["bytes"], row["ms_p50"] = int(row["bytes"]), float(row["ms_p50"])
        row["busbw_GBps"] = float(row["busbw_GBps"] or 0)
    return found


def compare(found, op="all_reduce", ours="iris", theirs="nccl"):
    """Our median time against theirs at each size both measured, and the ratio."""
    by = {(r["provider"], r["bytes"]): r["ms_p50"] for r in found if r["op"] == op and r["variant"] == r["provider"]}
    sizes = sorted({size for provider, size in by if (ours, size) in by and (theirs, size) in by})
    print(f"{op}: median time per call, {ours} against {theirs} ({found[0]['gpu']}, commit {found[0]['commit']})")
    print(f"{'bytes':>10} {ours + ' us':>10} {theirs + ' us':>10} {'speedup':>8}")
    for size in sizes:
        a, b = by[(ours, size)] * 1e3, by[(theirs, size)] * 1e3
        print(f"{format_bytes(size):>10} {a:>10.1f} {b:>10.1f} {b / a:>7.2f}x")
    return sizes


# %%
# The figure the benchmark draws from the same rows (``iris.bench.report.plot_curves``): bus bandwidth against size,
# one line per provider, one panel per collective.
#
# .. image:: /../results/2xH200/ccl/ccl_busbw.png
#    :alt: bus bandwidth of the collectives against message size on two H200s, iris beside NCCL
#
# Small messages are latency-bound (the left of each panel: iris's one-kernel calls against NCCL's), large ones
# bandwidth-bound (the right: both near the links' speed).
def main():
    found = rows()
    assert compare(found), "no size measured by both providers"
    path = sys.argv[1] if len(sys.argv) > 1 else str(pathlib.Path(tempfile.gettempdir()) / "iris_ccl_busbw.png")
    figure = plot_curves(found, path,
                         ["all_reduce", "all_gather", "reduce_scatter", "all_to_all"], title="bus bandwidth")
    print(f"figure: {figure}" if figure else "(no figure: matplotlib is not installed)")


if __name__ == "__main__":
    main()
