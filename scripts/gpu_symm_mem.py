"""iris's device API on PyTorch's symmetric memory beside iris's heap, at world size 1 on one GPU (torch refuses two
ranks on one GPU):

    torchrun --nproc_per_node=1 scripts/gpu_symm_mem.py        # or plain python: iris.run starts one rank

For each provider (``ctx.provider``: iris's heap; ``iris.TorchSymmMemProvider``): a tensor and its map, a kernel that
stores through ``iris.store`` with the map's table and loads back with ``iris.load``; ``ctx.ccl.all_reduce`` (one-shot,
bf16, 8 KiB and 1 MiB) and ``ctx.ops.matmul_all_gather`` (fused, bf16 4096 x 4096 x 4096) on the provider's tensors;
each checked element by element (poisoned first) and timed on both (``iris.do_bench``, median of 100). Prints one
line a measurement and ``symm_mem: PASS`` or ``FAIL`` last."""

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
        one_shot = iris.ccl.CollectiveConfig(algorithm="one_shot")
        for nbytes in (8192, 1 << 20):
            inp, _ = provider.allocate_symmetric_map(nbytes // 2, dtype=torch.bfloat16)
            inp.copy_(torch.randint(-8, 8, (nbytes // 2,), device=ctx.get_device()).to(torch.bfloat16))
            out = torch.full_like(inp, -77.0)
            call = lambda: ctx.ccl.all_reduce(out, inp, config=one_shot)  # noqa: E731
            call()
            torch.cuda.synchronize()
            correct = torch.equal(out, inp)  # world size 1: the sum of one rank
            ok &= correct
            ms = iris.do_bench(call, n_warmup=10, n_repeat=100, return_mode="median")
            print(f"{name:16s} ccl.all_reduce one_shot bf16 {nbytes:>8d} B correct {correct} {ms * 1e3:8.2f} us",
                  flush=True)
        M = K = cols = 4096
        a = torch.randint(-2, 3, (M, K), device=ctx.get_device()).to(torch.bfloat16)
        b = torch.randint(-2, 3, (K, cols), device=ctx.get_device()).to(torch.bfloat16)
        out, _ = provider.allocate_symmetric_map(M, cols, dtype=torch.bfloat16)
        out.fill_(-77.0)
        fused = iris.ops.OpsConfig(variant="fused")
        call = lambda: ctx.ops.matmul_all_gather(out, a, b, config=fused)  # noqa: E731
        call()
        torch.cuda.synchronize()
        correct = torch.equal(out, (a.float() @ b.float()).to(torch.bfloat16))  # small integers: exact
        ok &= correct
        ms = iris.do_bench(call, n_warmup=5, n_repeat=50, return_mode="median")
        print(f"{name:16s} ops.matmul_all_gather bf16 {M}x{cols}x{K} correct {correct} {ms * 1e3:8.1f} us",
              flush=True)
    print(f"symm_mem: {'PASS' if ok else 'FAIL'}", flush=True)


if __name__ == "__main__":
    iris.run(main, 1)
