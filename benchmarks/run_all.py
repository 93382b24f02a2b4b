"""Every communication microbenchmark on every GPU, in one command.

    python benchmarks/run_all.py --out results/microbench          # 2 x H200: about 2 minutes
    python benchmarks/run_all.py --out /tmp/mb --quick             # tiny sizes (the cpu-backend check)
    torchrun --nproc-per-node=2 benchmarks/run_all.py --out DIR    # same, ranks started by torchrun

Runs the copy-kernel shape sweep, then load/store/get/put (curve over 4 KiB .. 2 GiB for ranks 0 -> 1, and
the rank x rank matrix at 1 GiB), all-load/all-store, remote atomics and the flag ping-pong, each beside
the copy engine, a raw-pointer Triton kernel or torch.distributed. Writes DIR/microbench.{csv,json,md} and
PNG figures, and prints the headline tables last.
"""

from iris.bench.suite import cli

if __name__ == "__main__":
    cli(stem="microbench", description=__doc__)
