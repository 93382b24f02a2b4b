"""The race detector's cost: each example run as a user runs it (``python examples/NN.py --world-size 2``, its ranks
started by ``iris.run``), on the cpu backend, without and with ``IRIS_SANITIZE=race``, back to back.

    python scripts/race_slowdown.py [--examples 04 05 07 ...] [--repeat 1]     # every example by default

Prints one row per example (the CPU seconds of the example and its rank processes, without and with, their ratio,
the wall seconds with, and whether the sanitized run reported nothing) and the geometric mean of the ratios last.
CPU time, not wall time: it is what the detector adds, and it does not change with the machine's other load. Both
include starting the ranks (a few seconds each run), as a user's run does."""

import argparse
import glob
import math
import os
import resource
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# every example but 09, which turns the detector on itself
DEFAULT = sorted(os.path.basename(p)[:2] for p in glob.glob(os.path.join(ROOT, "examples", "[0-9]*.py"))
                 if not os.path.basename(p).startswith("09"))


def _children_cpu():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # every waited-for descendant: the ranks too
    return usage.ru_utime + usage.ru_stime


def run(path, sanitize):
    """(CPU seconds, wall seconds, whether it passed with no report, output) of one run of the example."""
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "IRIS_SANITIZE")}
    env.update(IRIS_BACKEND="cpu", PYTHONPATH=ROOT)
    if sanitize:
        env["IRIS_SANITIZE"] = "race"
    cpu, start = _children_cpu(), time.monotonic()
    done = subprocess.run([sys.executable, path, "--world-size", "2"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=1800)
    output = done.stdout + done.stderr
    return (_children_cpu() - cpu, time.monotonic() - start, done.returncode == 0 and "data race" not in output,
            output)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", nargs="*", default=DEFAULT, help="example numbers")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each, the fastest kept")
    args = parser.parse_args()
    ratios = []
    print(f"{'example':46} {'plain cpu s':>11} {'race cpu s':>10} {'ratio':>6} {'race wall s':>11}  clean")
    for number in args.examples:
        path = sorted(glob.glob(os.path.join(ROOT, "examples", f"{number}_*.py")))[0]
        plain = min(run(path, False)[0] for _ in range(args.repeat))
        raced = [run(path, True) for _ in range(args.repeat)]
        cpu, wall = min(r[0] for r in raced), min(r[1] for r in raced)
        clean = all(r[2] for r in raced)
        if not clean:
            print(raced[0][3][-3000:], file=sys.stderr)
        ratios.append(cpu / plain)
        print(f"{os.path.basename(path):46} {plain:11.1f} {cpu:10.1f} {cpu / plain:6.2f} {wall:11.1f}  "
              f"{'yes' if clean else 'NO'}", flush=True)
    print(f"geometric mean of the ratios: {math.exp(sum(map(math.log, ratios)) / len(ratios)):.2f}")


if __name__ == "__main__":
    main()
