"""iris's device API on PyTorch's symmetric memory beside iris's heap, at world size 1 on one GPU (torch refuses two
ranks on one GPU):

    torchrun --nproc_per_node=1 scripts/gpu_symm_mem.py        # or plain python: iris.run starts one rank

For each provider (``ctx.provider``: iris's heap; ``iris.TorchSymmMemProvider``): a tensor and its map, a kernel that
stores through ``iris.store`` with the map's table and loads back with ``iris.load``, checked element by element
(poisoned first), then the same kernel timed on both (``iris.do_bench``, median of 100). Prints one line a provider
and ``symm_mem: PASS`` or ``FAIL`` last."""

import os

import torch
import triton
import triton.language as tl

import iris

N = 1 << 24  # 64 MiB of fp32
BLOCK = 4096


@triton.jit
def _roundtrip_kernel(dst, got, bases, n, rank, peer, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    iris.store(dst + offs, offs.to(tl.float32) * 0.5, rank, peer, bases, mask=mask, hint=16)
    tl.store(got + offs, iris.load(dst + offs, rank, peer, bases, mask=mask, hint=16), mask=mask)


def main():
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    ctx = iris.iris(heap_size=1 << 28)
    rank = ctx.get_rank()
    expected = torch.arange(N, device=ctx.get_device(), dtype=torch.float32) * 0.5
    ok = True
    for name, provider in (("iris heap", ctx.provider), ("torch symm_mem", iris.TorchSymmMemProvider())):
        dst, address = provider.allocate_symmetric_map(N, dtype=torch.float32)
        got = torch.full((N,), -77.0, device=ctx.get_device())
        dst.fill_(-77.0)
        grid = (triton.cdiv(N, BLOCK),)
        run = lambda: _roundtrip_kernel[grid](dst, got, address.peer_bases, N, rank, rank, BLOCK=BLOCK)  # noqa: E731
        run()
        torch.cuda.synchronize()
        correct = torch.equal(dst, expected) and torch.equal(got, expected)
        ok &= correct
        ms = iris.do_bench(run, n_warmup=10, n_repeat=100, return_mode="median")
        print(f"{name:16s} table {address.bases[rank]:#x} (tensor {dst.data_ptr():#x}) correct {correct} "
              f"store+load 64 MiB {ms * 1e3:8.1f} us  {2 * N * 4 / ms / 1e6:7.1f} GB/s", flush=True)
    print(f"symm_mem: {'PASS' if ok else 'FAIL'}", flush=True)


if __name__ == "__main__":
    iris.run(main, 1)
