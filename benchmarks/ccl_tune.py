"""Sweep the collective config (programs, block, warps) at one large size; prints GB/s (busbw) per config.

    python benchmarks/ccl_tune.py [--bytes 268435456]
"""

import argparse
import itertools

import torch

import iris
from iris.ccl import CollectiveConfig


def main(nbytes):
    ctx = iris.iris(heap_size=4 * nbytes + (64 << 20))
    world = ctx.get_num_ranks()
    n = nbytes // 2
    inp, out = ctx.randn(n, dtype=torch.bfloat16), ctx.zeros(n, dtype=torch.bfloat16)
    small = ctx.zeros(n // world, dtype=torch.bfloat16)
    lines = []
    for sms, block, warps in itertools.product((16, 32, 64, 128), (2048, 4096, 8192), (4, 8, 16)):
        cfg = CollectiveConfig(algorithm="two_shot", comm_sms=sms, block_size=block, num_warps=warps)
        cases = (("all_reduce", lambda: ctx.ccl.all_reduce(out, inp, config=cfg), 2 * (world - 1) / world),
                 ("all_gather", lambda: ctx.ccl.all_gather(out, small, config=cfg), (world - 1) / world))
        for op, fn, factor in cases:
            ms = iris.do_bench(fn, barrier_fn=ctx.barrier, n_warmup=3, n_repeat=10, return_mode="median")
            ms = max(ctx.broadcast(ms, src=r) for r in range(world))  # the slowest rank
            busbw = nbytes / ms / 1e6 * factor
            lines.append(f"{op:10s} sms={sms:3d} block={block:5d} warps={warps:2d}  {busbw:6.1f} GB/s")
    if ctx.get_rank() == 0:
        print("\n".join(sorted(lines, key=lambda line: (line.split()[0], -float(line.split()[-2])))))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bytes", type=int, default=256 << 20)
    iris.run(main, torch.cuda.device_count() if torch.cuda.is_available() else 2, parser.parse_args().bytes)
