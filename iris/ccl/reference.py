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


def all_to_all_single(inputs, rank):
    """torch's layout: slices along dim 0."""
    return torch.cat([x.chunk(len(inputs), dim=0)[rank] for x in inputs], dim=0)


def all_to_all(inputs, rank):
    """Upstream Iris's layout: column blocks along dim 1 (dim 0 for a 1-D tensor)."""
    dim = 1 if inputs[0].dim() >= 2 else 0
    return torch.cat([x.chunk(len(inputs), dim=dim)[rank] for x in inputs], dim=dim)


def reduce_scatter_v(inputs, rank, splits, op="sum"):
    """Uneven splits: rank ``rank`` gets elements ``sum(splits[:rank])`` to ``sum(splits[:rank + 1])`` of the flat
    reduction."""
    start = sum(splits[:rank])
    return reduce_all([x.reshape(-1) for x in inputs], op)[start:start + splits[rank]]


def broadcast(inputs, src):
    return inputs[src]


def reduce(inputs, op="sum"):
    """What the root gets; the others' ``out`` is unchanged."""
    return reduce_all(inputs, op)


def gather(inputs):
    """What the root gets; the others' ``out`` is unchanged."""
    return torch.cat(inputs, dim=0)


def scatter(inputs, rank, src):
    return inputs[src].chunk(len(inputs), dim=0)[rank]


def send_recv(inputs, src):
    """What the receiving rank's tensor becomes: the sender's."""
    return inputs[src]


def reduce_scatter_tiles(inputs, rank, out, layout, op="sum"):
    """Upstream Iris's full-size reduce_scatter: ``out`` (rank ``rank``'s, before the call) with the reduction
    written at the tiles ``layout`` (``reduce_scatter_tiles.TileLayout``) gives that rank."""
    ref = out.double().clone() if out.is_floating_point() else out.clone()
    total = reduce_all(inputs, op)
    M, N = total.shape
    first, count, step = layout.owned(M, N, rank, len(inputs))
    for t in range(first, first + count * step, step):
        pid_m, pid_n = layout.tile_rows_cols(t, M, N)
        rows = slice(pid_m * layout.block_m, (pid_m + 1) * layout.block_m)
        cols = slice(pid_n * layout.block_n, (pid_n + 1) * layout.block_n)
        ref[rows, cols] = total[rows, cols].to(ref.dtype)
    return ref


def all_reduce_rmsnorm(inputs, residual, weight, eps):
    """``(out, residual_out)`` of ``ccl.all_reduce_rmsnorm``, in float64."""
    residual_out = reduce_all(inputs, "sum") + residual.double()
    inv_rms = torch.rsqrt(residual_out.pow(2).mean(-1, keepdim=True) + eps)
    return residual_out * inv_rms * weight.double(), residual_out
