"""torch references for the collectives, in float64 where values are floating point: what the tests
compare against (``ref``), and the pseudocode the docstrings restate. ``inputs[r]`` is rank r's input."""

import torch


def reduce_all(inputs, op):
    stacked = torch.stack([x.double() if x.is_floating_point() else x for x in inputs])
    if op in ("sum", "avg"):
        total = stacked.sum(0)
        return total / len(inputs) if op == "avg" else total.to(stacked.dtype)
    return stacked.amax(0) if op == "max" else stacked.amin(0)


def all_reduce(inputs, op="sum"):
    return reduce_all(inputs, op)


def all_gather(inputs):
    return torch.cat(inputs, dim=0)


def reduce_scatter(inputs, rank, op="sum"):
    return reduce_all(inputs, op).chunk(len(inputs), dim=0)[rank]


def all_to_all(inputs, rank):
    return torch.cat([x.chunk(len(inputs), dim=0)[rank] for x in inputs], dim=0)


def all_reduce_rmsnorm(inputs, residual, weight, eps):
    """``(out, residual_out)`` of ``ccl.all_reduce_rmsnorm``, in float64."""
    residual_out = reduce_all(inputs, "sum") + residual.double()
    inv_rms = torch.rsqrt(residual_out.pow(2).mean(-1, keepdim=True) + eps)
    return residual_out * inv_rms * weight.double(), residual_out
