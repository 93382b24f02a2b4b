"""Copies of upstream's racy examples with the wait they lack, to tell their race from a fault of ours:

    python scripts/upstream_race_tree.py UPSTREAM      # writes UPSTREAM/race/examples/{16_...,29_...,30_...}

- 16_gemm_one_shot_all_reduce_independent: its all-reduce kernel reads the peers' partial sums right after this
  rank's own GEMM; the copy waits for every rank's GEMM first (``torch.cuda.synchronize()`` and ``ctx.barrier()``).
- 29_x_all_reduce and 30_x_all_gather: each checks what the peers' kernels add or store into its output right after
  its own kernel (``torch.cuda.synchronize()`` waits for this rank's work only); the copy calls ``ctx.barrier()``
  before the check.

Each copy differs from upstream's file by that one line; everything else in the directory is copied as it is, and
so is ``examples/common`` (the kernels import its helpers). If a copy passes every time where the file as upstream
wrote it does not, the missing wait is the failure's only cause.
"""

import os
import shutil
import sys

# example directory -> (the line the wait goes before, the wait), each line as the example indents it
WAITS = {
    "16_gemm_one_shot_all_reduce_independent": ("            if not only_gemm:\n",
                                                "            torch.cuda.synchronize()\n            ctx.barrier()\n"),
    "29_x_all_reduce": ('    if args["validate"]:\n', "    ctx.barrier()\n"),
    "30_x_all_gather": ('    if args["validate"]:\n', "    ctx.barrier()\n"),
}


def main(root):
    common = os.path.join(root, "examples", "common")
    if os.path.isdir(common):
        shutil.rmtree(os.path.join(root, "race", "examples", "common"), ignore_errors=True)
        shutil.copytree(common, os.path.join(root, "race", "examples", "common"))
    for name, (before, wait) in WAITS.items():
        source = os.path.join(root, "examples", name)
        copy = os.path.join(root, "race", "examples", name)
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(source, copy)
        path = os.path.join(copy, "example.py")
        with open(path) as f:
            text = f.read()
        if text.count(before) != 1:
            sys.exit(f"{path}: expected the line {before!r} once, found it {text.count(before)} times")
        with open(path, "w") as f:
            f.write(text.replace(before, wait + before))
        print(f"{copy}: a wait before {before.strip()!r}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
