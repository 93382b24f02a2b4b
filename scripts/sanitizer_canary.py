"""A deliberate out-of-bounds store in every rank process, for scripts/sanitize.sh: under memcheck each rank
must report one invalid global write, which shows that the tool follows the rank processes iris.run starts
(and not only the parent). Exits 0 when the ranks failed as planted; prints what happened either way."""

import torch
import triton
import triton.language as tl

import iris

FAR = 1 << 36  # elements past the end: no allocation of this process reaches 256 GiB beyond a fresh tensor


@triton.jit
def _store_far_kernel(ptr, far):
    tl.store(ptr + far + tl.arange(0, 32), tl.full([32], 1.0, tl.float32))


def main():
    ctx = iris.iris(heap_size=1 << 20)
    target = torch.empty(32, dtype=torch.float32, device=ctx.get_device())
    _store_far_kernel[(1,)](target, FAR)
    torch.cuda.synchronize()  # under memcheck the launch fails here; without it, an illegal-address error
    return "stored without an error"


if __name__ == "__main__":
    try:
        print("canary: every rank finished:", iris.run(main, 2))
        raise SystemExit(1)
    except iris.RankError as e:
        print(f"canary: ranks failed as planted ({str(e).splitlines()[0]})")
