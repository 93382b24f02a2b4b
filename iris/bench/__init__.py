"""Benchmark harness: ``do_bench`` (one function on one rank), ``Sweep``/``run_sweep`` (axes x providers on
every rank, one result schema) and the report writers. The communication microbenchmarks live in
``iris.bench.micro`` (kernels in ``iris.bench.kernels``) and run as one command from ``iris.bench.suite``."""

from iris.host.timing import do_bench
from iris.bench.harness import Point, Sweep, Timing, measure, run_sweep
from iris.bench.report import MEASURED, SCHEMA, format_table, plot_curves, plot_heatmap, write_results

__all__ = ["do_bench", "Point", "Sweep", "Timing", "measure", "run_sweep", "SCHEMA", "MEASURED", "format_table",
           "write_results", "plot_curves", "plot_heatmap"]
