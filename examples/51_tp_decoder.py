"""A tensor-parallel Llama-style decoder: one model code path, the communication plugged in.

Each rank holds 1/W of the attention heads and of the MLP (``iris.models.TensorParallelLlama``). The same model
runs with torch.distributed's all-reduce and with iris: ``ccl.all_reduce_rmsnorm`` (the all-reduce, residual
add and next RMSNorm in one kernel) for decode, and ``ops.all_gather_matmul`` / ``ops.matmul_reduce_scatter``
over sequence-parallel activations for prefill. Both must match the single-rank model: a prefill of a few
sequences into a KV cache, then one decode step each.

    python examples/51_tp_decoder.py [--world-size 2] [--layers 2] [--batch 2] [--tokens 4]
"""

import argparse

import torch

import iris  # before triton: on the cpu backend this switches Triton to its interpreter
from iris.models import IrisComm, LlamaConfig, NoComm, TensorParallelLlama, TorchDistComm

iris.set_logger_level(iris.INFO)  # the ranks print their ctx.info lines as HH:MM:SS INFO [Iris] [rank/world] ...

SEED = 1234


def run(model, prompt, step):
    cache = model.new_cache(prompt.shape[0], prompt.shape[1] + 1)
    prefill = model.forward(prompt, cache).float().cpu()
    decode = model.forward(step, cache, start=prompt.shape[1]).float().cpu()
    return prefill, decode


def main(layers, batch, tokens):
    ctx = iris.iris(heap_size=1 << 26)
    rank, world_size, dev = ctx.get_rank(), ctx.get_num_ranks(), ctx.get_device()
    on_gpu = dev.type == "cuda"
    # small enough for the Triton interpreter on the cpu backend; a 1024-wide model in bf16 on GPUs
    config = (LlamaConfig(hidden=1024, intermediate=2816, heads=8, kv_heads=4, layers=layers, max_positions=4096)
              if on_gpu else LlamaConfig.toy(layers=layers))
    dtype, tolerance = (torch.bfloat16, 3e-2) if on_gpu else (torch.float32, 1e-4)
    gen = torch.Generator().manual_seed(SEED)  # the same tokens on every rank
    prompt = torch.randn(batch, tokens, config.hidden, generator=gen).to(dtype).to(dev)
    step = torch.randn(batch, 1, config.hidden, generator=gen).to(dtype).to(dev)
    ref = run(TensorParallelLlama(config, NoComm(), dtype, dev, seed=SEED), prompt, step)
    # sequence-parallel prefill from batch * tokens rows on (the default waits for 256 tokens)
    for comm in (TorchDistComm(), IrisComm(ctx, prefill_min_rows=batch * tokens)):
        tri = run(TensorParallelLlama(config, comm, dtype, dev, seed=SEED), prompt, step)
        for what, t, r in zip(("prefill", "decode"), tri, ref):
            err = ((t - r).norm() / r.norm()).item()
            if not err <= tolerance:
                raise AssertionError(f"tp_decoder: {comm.name} {what} differs from one rank: relative error {err:.2e}")
    ctx.barrier()
    if rank == 0:
        ctx.info(f"tp_decoder: {layers} layers on {world_size} ranks, prefill of {batch} x {tokens} tokens and a "
                 "decode step through torch.distributed and iris match the single-rank model")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=4)
    args = parser.parse_args()
    iris.run(main, args.world_size, args.layers, args.batch, args.tokens)
