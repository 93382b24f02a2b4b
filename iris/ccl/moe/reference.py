"""torch references for MoE dispatch and combine, from every shard's inputs (what the tests compare against).

``tokens[s]``, ``topk_idx[s]``, ``topk_weight[s]`` are shard s's inputs; ``owner[e]`` is expert e's shard.
"""

import torch


def dispatch(tokens, topk_idx, owner, shard):
    """Shard ``shard``'s received rows: for each of its experts (ascending global id), the rows of every (source
    shard, token, slot) routed to it, in that order. Returns ``(rows [n, H], sizes [L])``."""
    mine = [e for e in range(owner.numel()) if int(owner[e]) == shard]
    rows, sizes = [], []
    for e in mine:
        size = 0
        for x, idx in zip(tokens, topk_idx):
            k = idx.shape[1]
            hits = (idx.reshape(-1).to(torch.int64) == e).nonzero().flatten()  # in (token, slot) order
            rows.append(x[hits // k])
            size += hits.numel()
        sizes.append(size)
    H = tokens[0].shape[1]
    return (torch.cat(rows) if rows else tokens[0].new_empty((0, H))), torch.tensor(sizes, dtype=torch.int32)


def combine(expert_rows, topk_idx, topk_weight, num_experts, weighted, dtype):
    """``out[t] = sum_j [0 <= idx[t, j] < E] * (w[t, j] if weighted) * expert_rows[t, j]`` in fp32, slots in order
    j = 0 .. k-1, rounded once to ``dtype``; ``expert_rows [T, k, H]`` holds the expert output of each slot."""
    T, k, H = expert_rows.shape
    acc = torch.zeros((T, H), dtype=torch.float32)
    idx = topk_idx.to(torch.int64)
    for j in range(k):
        valid = ((idx[:, j] >= 0) & (idx[:, j] < num_experts))[:, None]
        x = expert_rows[:, j].to(torch.float32)
        if weighted:
            x = x * topk_weight[:, j:j + 1].to(torch.float32)
        acc = acc + torch.where(valid, x, torch.zeros((), dtype=torch.float32))
    return acc.to(dtype)
