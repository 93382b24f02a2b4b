"""The race detector's cost: each example run as a user runs it (``python examples/NN.py --world-size 2``, its ranks
started by ``iris.run``), on the cpu backend, without and with ``IRIS_SANITIZE=race``, back to back.

    python scripts/race_slowdown.py [--examples 04 05 07 ...] [--repeat 1]     # every example by default

Prints one row per example (wall seconds without and with, their ratio, and whether the sanitized run reported
nothing) and the geometric mean of the ratios last. Wall time includes starting the ranks (a few seconds each run),
as a user's does."""

import argparse
import glob
import math
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# every example but 09, which turns the detector on itself
DEFAULT = sorted(os.path.basename(p)[:2] for p in glob.glob(os.path.join(ROOT, "examples", "[0-9]*.py"))
                 if not os.path.basename(p).startswith("09"))


def run(path, sanitize):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "IRIS_SANITIZE")}
    env.update(IRIS_BACKEND="cpu", PYTHONPATH=ROOT)
    if sanitize:
        env["IRIS_SANITIZE"] = "race"
    start = time.monotonic()
    done = subprocess.run([sys.executable, path, "--world-size", "2"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=1800)
    seconds = time.monotonic() - start
    output = done.stdout + done.stderr
    return seconds, done.returncode == 0 and "data race" not in output, output


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--examples", nargs="*", default=DEFAULT, help="example numbers")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each, the fastest kept")
    args = parser.parse_args()
    ratios = []
    print(f"{'example':42} {'plain s':>8} {'race s':>8} {'ratio':>6}  clean")
    for number in args.examples:
        path = sorted(glob.glob(os.path.join(ROOT, "examples", f"{number}_*.py")))[0]
        plain = min(run(path, False)[0] for _ in range(args.repeat))
        raced = [run(path, True) for _ in range(args.repeat)]
        seconds = min(r[0] for r in raced)
        clean = all(r[1] for r in raced)
        if not clean:
            print(raced[0][2][-3000:], file=sys.stderr)
        ratios.append(seconds / plain)
        print(f"{os.path.basename(path):42} {plain:8.1f} {seconds:8.1f} {seconds / plain:6.2f}  {'yes' if clean else 'NO'}")
    print(f"geometric mean of the ratios: {math.exp(sum(map(math.log, ratios)) / len(ratios)):.2f}")


if __name__ == "__main__":
    main()
