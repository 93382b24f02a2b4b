"""A rank late to a collective, and what the others say while they wait inside the kernel (the watchdog's notice):

    IRIS_NOTICE_S=1 python scripts/stalled_call.py [--world-size 3]

Rank ``world_size - 1`` sleeps 4 s before the second all_reduce; every other rank should log, within a second or two
of ``IRIS_NOTICE_S``, that ccl.all_reduce waits for it. Ends with every rank's result checked."""

import argparse
import time

import torch

import iris


def main():
    ctx = iris.iris(1 << 24)
    world = ctx.get_num_ranks()
    inp, out = ctx.ones(4096), ctx.zeros(4096)
    ctx.ccl.all_reduce(out, inp)
    if ctx.get_rank() == world - 1:
        time.sleep(4)
    ctx.ccl.all_reduce(out, inp)
    assert torch.equal(out.cpu(), torch.full((4096,), float(world))), out
    print(f"rank {ctx.get_rank()}: all_reduce right after the late rank arrived", flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=3)
    iris.run(main, parser.parse_args().world_size)
