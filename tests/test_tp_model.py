"""The tensor-parallel Llama-style decoder on 2 ranks against the same model on one rank: every provider, prefill
sequence-parallel and all-reduced, decode from the prefill's KV cache, and the errors a user can hit."""

import pytest
import torch

from iris.models import IrisComm, LlamaConfig, NoComm, SymmMemComm, TensorParallelLlama, TorchDistComm
from conftest import on_gpu
from rank_utils import GPU_SCALE, SEED, error_message, new_context

# fp32 differs from the reference only in the order of the sums over ranks; bf16 rounds every activation
TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 3e-2}
WORLD_SIZE = 2


def relative_error(tri, ref):
    return ((tri.double() - ref.double()).norm() / ref.double().norm()).item()


def _steps(model, batch, tokens):
    """Prefill ``batch`` sequences of ``tokens``, then decode one token each from the cache; then a prefill of
    an odd token count (all-reduced: it does not split over the ranks). Outputs copied, as the model may reuse
    its buffers."""
    dev = model.device
    gen = torch.Generator().manual_seed(SEED)
    prompt = torch.randn(batch, tokens, model.config.hidden, generator=gen).to(model.dtype).to(dev)
    step = torch.randn(batch, 1, model.config.hidden, generator=gen).to(model.dtype).to(dev)
    odd = torch.randn(1, tokens + 1, model.config.hidden, generator=gen).to(model.dtype).to(dev)
    cache = model.new_cache(batch, tokens + 1)
    outs = {"prefill": model.forward(prompt, cache).cpu().clone()}
    outs["decode"] = model.forward(step, cache, start=tokens).cpu().clone()
    outs["odd prefill"] = model.forward(odd).cpu().clone()
    return outs


def _model_body(dtype):
    ctx = new_context(1 << 26 if GPU_SCALE else 1 << 22)
    dev = ctx.get_device()
    # a 1024-wide model on GPUs (benchmarks/tp_model.py runs Llama-3-8B's shapes)
    config = (LlamaConfig(hidden=1024, intermediate=2816, heads=8, kv_heads=4, layers=2, max_positions=512)
              if GPU_SCALE else LlamaConfig.toy(layers=2))
    batch, tokens = (4, 64) if GPU_SCALE else (2, 4)
    ref = _steps(TensorParallelLlama(config, NoComm(), dtype, dev, seed=SEED), batch, tokens)
    providers = {"iris": IrisComm(ctx, prefill_min_rows=8), "iris unfused": IrisComm(ctx, fused_norm=False)}
    # Where ranks share a GPU (simulation) the default group is gloo (NCCL refuses two ranks on a device) and
    # torch symmetric memory refuses them too: those two run with a GPU per rank.
    if not ctx.shares_gpu:
        providers["torch.distributed"] = TorchDistComm()
        if on_gpu():
            providers["symm_mem"] = SymmMemComm(device=dev, prefill_min_rows=8)
    fails = []
    for name, comm in providers.items():
        tri = _steps(TensorParallelLlama(config, comm, dtype, dev, seed=SEED), batch, tokens)
        for step in ref:
            err = relative_error(tri[step], ref[step])
            if not err <= TOLERANCE[dtype]:  # NaN fails too
                fails.append(f"{name} {step}: relative error {err:.2e}")
    return fails


# bf16 on GPUs, where fp32 products run as tf32; fp32 on the cpu backend, where the sums' order is all that differs
@pytest.mark.parametrize("dtype", [torch.bfloat16] if on_gpu() else [torch.float32])
def test_matches_single_rank(pools, dtype):
    results = pools(WORLD_SIZE).run(_model_body, dtype)
    assert results == [[]] * WORLD_SIZE, results


def test_sequence_parallel_is_chosen_by_tokens():
    """The prefill above runs sequence-parallel and the decode all-reduced: the split follows the token count."""

    class Fake(IrisComm):
        def __init__(self):
            self.world_size, self.rank, self.prefill_min_rows = 2, 0, 8

    comm = Fake()
    assert comm.sequence_parallel(8) and not comm.sequence_parallel(2) and not comm.sequence_parallel(9)
    assert not NoComm().sequence_parallel(1 << 20)


def _errors_body():
    ctx = new_context()
    dev = ctx.get_device()
    model = TensorParallelLlama(LlamaConfig.toy(layers=1), IrisComm(ctx), torch.float32, dev)
    x = torch.randn(1, 3, 64, device=dev)
    return {
        "heads": error_message(TensorParallelLlama, LlamaConfig(hidden=96, heads=3, kv_heads=1, intermediate=64,
                                                                layers=1), IrisComm(ctx), torch.float32, dev),
        "start": error_message(model.forward, x, model.new_cache(1, 8), 2),
        "hidden": error_message(model.forward, torch.randn(1, 1, 32, device=dev)),
        "symm_mem": "" if on_gpu() else error_message(SymmMemComm, device=dev),
        "config": error_message(LlamaConfig, hidden=64, heads=5),
    }


def test_errors(pools):
    messages = pools(WORLD_SIZE).run(_errors_body)[0]
    expected = {
        "heads": "heads=3 is not divisible by the 2 ranks",
        "start": "3 tokens at start=2",
        "hidden": "x has hidden size 32, the model 64",
        "symm_mem": "" if on_gpu() else "SymmMemComm: torch symmetric memory needs CUDA tensors",
        "config": "hidden=64 must split into heads=5",
    }
    for case, text in expected.items():
        assert text in messages[case], (case, messages[case])
