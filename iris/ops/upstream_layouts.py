"""Upstream Iris's sharding for the two gather ops, where it differs from ours (``ctx.ops`` is upstream's
namespace, so its shapes keep upstream's meaning; the public functions tell the forms apart by shape):

| op | upstream's form (here) | our form (the fused schedules) |
| --- | --- | --- |
| ``all_gather_matmul`` | A [M, K / W] sharded along K: ``out = cat_r(A_r, dim=1) @ B`` | A [M / W, K]: ``cat_r(A_r, dim=0) @ B`` |
| ``matmul_all_gather`` | A [M / W, K] sharded by rows: ``out = cat_r(A_r @ B, dim=0)`` | B [K, N / W]: ``cat_r(A @ B_r, dim=1)`` |

Upstream's forms run bulk-synchronous: the iris all_gather, then cuBLAS (the Triton mainloop on the cpu
backend). Their bias is upstream's too: one value per output row ([M] and [M / W]), where ours is per column.
"""

import torch

from iris.ops import common


def is_k_sharded(out, a, b, size):
    """``all_gather_matmul``'s upstream form: A's columns times the group size make B's rows, and out has A's rows."""
    return (size > 1 and all(isinstance(t, torch.Tensor) and t.dim() == 2 for t in (out, a, b))
            and a.shape[1] * size == b.shape[0] and out.shape[0] == a.shape[0])


def is_row_sharded(out, a, b, size):
    """``matmul_all_gather``'s upstream form: out has the group's rows of A and B's columns."""
    return (size > 1 and all(isinstance(t, torch.Tensor) and t.dim() == 2 for t in (out, a, b))
            and a.shape[1] == b.shape[0] and out.shape[0] == size * a.shape[0] and out.shape[1] == b.shape[1])


def _check_row_bias(bias, rows, device, caller):
    if bias is not None:
        if bias.dim() != 1 or bias.shape[0] != rows:
            raise ValueError(f"{caller}: bias is {tuple(bias.shape)}, expected ({rows},): upstream's sharding adds "
                             "one value per row")
        if bias.device != device:
            raise ValueError(f"{caller}: bias is on {bias.device}; move it to {device}")


def _row_bias(out, bias, rows, caller):
    _check_row_bias(bias, rows, out.device, caller)
    if bias is not None:
        out.add_(bias[:, None])


def all_gather_matmul_k(ctx, out, a, b, bias, group, config, caller):
    """``out`` [M, N] = ``cat([A_r for r in group], dim=1) @ B (+ bias[:, None])``; A [M, K / W] this rank's column
    block (anywhere), B [K, N] the same on every rank. Collective; stream-ordered.

        ref = torch.cat([A_r for r in group], dim=1) @ B + bias[:, None]
    """
    common.check_operands(caller, out, a, b[:a.shape[1]])  # 2-D and dtypes; is_k_sharded checked the sizes
    sync = ctx.group_sync(group, caller)
    M, k_local = a.shape
    K, N = b.shape
    common.expect_shape(caller, "out", out, (M, N), "[A rows, B columns]")
    gathered = ctx.workspaces.get("all_gather_matmul.k_blocks", sync.ranks, (sync.size, M, k_local), a.dtype)
    full = ctx.workspaces.get("all_gather_matmul.k_full", sync.ranks, (M, K), a.dtype)
    gathered[sync.index].copy_(a)
    ctx.ccl.all_gather(gathered, gathered[sync.index], group=group)
    full.view(M, sync.size, k_local).copy_(gathered.permute(1, 0, 2))  # the blocks side by side along K
    common.bulk_gemm(out, full, b, config)
    _row_bias(out, bias, M, caller)
    return out


def matmul_all_gather_rows(ctx, out, a, b, bias, group, config, caller):
    """``out`` [M, N] (on the heap) = ``cat([A_r @ B (+ bias_r[:, None]) for r in group], dim=0)``; A [M / W, K]
    this rank's row block, B [K, N] the same on every rank. Collective; stream-ordered.

        ref = torch.cat([A_r @ B + bias_r[:, None] for r in group], dim=0)
    """
    common.check_operands(caller, out, a, b)
    ctx.symmetric_table(out, caller, "out")  # the heap, or another provider's memory (all_gather takes either)
    sync = ctx.group_sync(group, caller)
    m_local = a.shape[0]
    _check_row_bias(bias, m_local, out.device, caller)  # before anything runs
    slot = out[sync.index * m_local:(sync.index + 1) * m_local]
    common.bulk_gemm(slot, a, b, config)
    _row_bias(slot, bias, m_local, caller)
    ctx.ccl.all_gather(out, slot, group=group)  # in place: our rows are already in our slot
    return out
