"""Remote atomics (add, cas, xchg) throughput, and the latency of one flag round trip between two GPUs.

    python benchmarks/atomics.py --out DIR [--quick]

Throughput: one relaxed sys-scope atomic per element of a remote buffer, iris beside a raw-pointer
Triton kernel, compared with iris store bandwidth at the same bytes. Latency: ping-pong between ranks 0
and 1 (release xchg + acquire poll, and relaxed xchg + volatile poll); one way = round trip / 2.
Writes DIR/atomics.{csv,json,md} and DIR/atomics_curves.png.
"""

from iris.bench.suite import cli

if __name__ == "__main__":
    cli(parts=("atomics", "latency"), stem="atomics", description=__doc__)
