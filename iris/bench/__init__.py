"""Benchmark harness."""

from iris.bench.do_bench import do_bench

__all__ = ["do_bench"]
