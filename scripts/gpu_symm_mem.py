"""iris's device API, a collective and a fused op on PyTorch's symmetric memory beside iris's heap:

    python scripts/gpu_symm_mem.py                        # one GPU: world size 1 (torch refuses two ranks on one GPU)
    torchrun --nproc_per_node=2 scripts/gpu_symm_mem.py   # a GPU a rank

For each provider (``ctx.provider``: iris's heap; ``iris.TorchSymmMemProvider``): a tensor and its map, a kernel that
stores into the next rank's copy through ``iris.store`` with the map's table and loads it back with ``iris.load``;
``ctx.ccl.all_reduce`` (one-shot, bf16, 8 KiB and 1 MiB) and ``ctx.ops.matmul_all_gather`` (fused, bf16 4096 x 4096
x 4096, B split by columns) on the provider's tensors; on torch's memory also
``torch.ops.symm_mem.one_shot_all_reduce`` on the same input buffers. Each result is checked element by element
against torch (outputs poisoned first; small integers, so every sum is exact) and timed (``iris.do_bench``, median).
Rank 0 prints one line a measurement and ``symm_mem: PASS`` or ``FAIL`` last (FAIL when any rank's check failed)."""

import os

import torch
import torch.distributed as dist
import triton
import triton.language as tl

import iris
from iris.host.distributed import all_gather_object as dist_all_gather_object

N = 1 << 24  # 64 MiB of fp32
BLOCK = 4096
POISON = -77.0


@triton.jit
def _roundtrip_kernel(dst, got, bases, n, rank, peer, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    values = offs.to(tl.float32) * 0.5 + rank
    iris.store(dst + offs, values, rank, peer, bases, mask=mask, hint=16)
    tl.store(got + offs, iris.load(dst + offs, rank, peer, bases, mask=mask, hint=16), mask=mask)


def _ints(shape, seed, device, low=-8, high=8):
    """Small integers drawn from ``seed`` (the same on every rank that asks for ``seed``), as bf16."""
    g = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randint(low, high, shape, generator=g).to(device=device, dtype=torch.bfloat16)


def _warm_up(device, seconds=1.0):
    """Busy the GPU for ``seconds`` first, so its clocks have risen before the first provider's rows are timed."""
    if device.type != "cuda":
        return
    a = torch.randn(4096, 4096, device=device, dtype=torch.bfloat16)
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    while True:
        for _ in range(20):
            a @ a
        end.record()
        end.synchronize()
        if start.elapsed_time(end) > seconds * 1e3:
            return


def main():
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")
    ctx = iris.iris(heap_size=1 << 28)
    rank, world, dev = ctx.get_rank(), ctx.get_num_ranks(), ctx.get_device()
    peer, sender = (rank + 1) % world, (rank - 1) % world
    say = print if rank == 0 else (lambda *a, **k: None)
    ok = True
    _warm_up(dev)
    for name, provider in (("iris heap", ctx.provider), ("torch symm_mem", iris.TorchSymmMemProvider())):
        dst, address = provider.allocate_symmetric_map(N, dtype=torch.float32)
        got = torch.full((N,), POISON, device=dev)
        dst.fill_(POISON)
        ctx.barrier()
        grid = (triton.cdiv(N, BLOCK),)
        run = lambda: _roundtrip_kernel[grid](dst, got, address.peer_bases, N, rank, peer, BLOCK=BLOCK)  # noqa: E731
        run()
        torch.cuda.synchronize()
        ctx.barrier()
        half = torch.arange(N, device=dev, dtype=torch.float32) * 0.5
        correct = torch.equal(dst, half + sender) and torch.equal(got, half + rank)
        ok &= correct
        ms = iris.do_bench(run, n_warmup=10, n_repeat=100, return_mode="median")
        say(f"{name:16s} table {address.bases[rank]:#x} (tensor {dst.data_ptr():#x}) correct {correct} "
            f"store to rank {peer} + load 64 MiB {ms * 1e3:8.1f} us  {2 * N * 4 / ms / 1e6:7.1f} GB/s", flush=True)

        one_shot = iris.ccl.CollectiveConfig(algorithm="one_shot")
        for nbytes in (8192, 1 << 20):
            n = nbytes // 2
            inp, _ = provider.allocate_symmetric_map(n, dtype=torch.bfloat16)
            inp.copy_(_ints((n,), 100 + rank, dev))
            expected = sum(_ints((n,), 100 + r, dev).float() for r in range(world)).to(torch.bfloat16)
            out = torch.full_like(inp, POISON)
            calls = [("ccl.all_reduce one_shot", lambda: ctx.ccl.all_reduce(out, inp, config=one_shot))]
            if name == "torch symm_mem":  # torch's own one-shot kernel on the same rendezvoused buffer
                group_name = dist.group.WORLD.group_name
                calls.append(("torch one_shot_all_reduce",
                              lambda: out.copy_(torch.ops.symm_mem.one_shot_all_reduce(inp, "sum", group_name))))
            for label, call in calls:
                out.fill_(POISON)
                ctx.barrier()
                call()
                torch.cuda.synchronize()
                correct = torch.equal(out, expected)
                ok &= correct
                ms = iris.do_bench(call, n_warmup=10, n_repeat=100, return_mode="median")
                say(f"{name:16s} {label:26s} bf16 {nbytes:>8d} B correct {correct} {ms * 1e3:8.2f} us", flush=True)

        M = K = cols = 4096
        a = _ints((M, K), 7, dev, -2, 3)
        b = _ints((K, cols // world), 200 + rank, dev, -2, 3)
        out, _ = provider.allocate_symmetric_map(M, cols, dtype=torch.bfloat16)
        expected = torch.cat([a.float() @ _ints((K, cols // world), 200 + r, dev, -2, 3).float()
                              for r in range(world)], dim=1).to(torch.bfloat16)  # fp32 sums of small integers: exact
        # The default config, and on the heap also the SMs storing every tile (what a provider's out always gets:
        # the copy-engine walk needs the heap).
        configs = [("default", iris.ops.OpsConfig(variant="fused"))]
        if name == "iris heap":
            configs.append(("SM stores", iris.ops.OpsConfig(variant="fused", copy_engine=False)))
        for label, config in configs:
            out.fill_(POISON)
            ctx.barrier()
            call = lambda: ctx.ops.matmul_all_gather(out, a, b, config=config)  # noqa: E731
            call()
            torch.cuda.synchronize()
            ctx.barrier()
            correct = torch.equal(out, expected)
            ok &= correct
            ms = iris.do_bench(call, n_warmup=5, n_repeat=50, return_mode="median")
            say(f"{name:16s} ops.matmul_all_gather {label:9s} bf16 {M}x{cols}x{K} correct {correct} "
                f"{ms * 1e3:8.1f} us", flush=True)
    passed = all(dist_all_gather_object(ok))
    say(f"symm_mem: {'PASS' if passed else 'FAIL'}", flush=True)
    ctx.close()


if __name__ == "__main__":
    iris.run(main, 1)
