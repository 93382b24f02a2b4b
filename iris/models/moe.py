"""An expert-parallel MoE layer: a router, experts as grouped GEMMs, and iris's dispatch and combine between.

On every rank of the group, for its own tokens ``x [T, H]``:

    logits = x @ w_router                          fp32, the router replicated on every rank
    idx, gate = topk(logits, k)                    softmax over the chosen k
    buf, meta, handle = dispatcher.dispatch(x, idx, gate)
    h = silu(buf @ w_gate[e]) * (buf @ w_up[e])    per received row, e its expert: grouped GEMMs over meta
    y = h @ w_down[e]
    out = dispatcher.combine(y, handle, weighted=True)

Each rank holds the weights of its own experts only. ``reference`` computes the same layer on one device with
every expert's weights and no communication. Weights are random from a seeded generator, drawn whole and then
sliced, so every world size sees the same model. With ``validate=False`` nothing in the layer waits for the host
(the grouped GEMM takes its offsets on the device), so a decode step can be captured in a CUDA graph.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from iris.ccl import MoEDispatchConfig
from iris.ccl.moe.routing import owners, topk
from iris.platform import private


@dataclass(frozen=True)
class MoEConfig:
    """DeepSeek-V3's routed experts by default: H 7168, 256 experts of intermediate size 2048, top-8."""

    hidden: int = 7168
    intermediate: int = 2048
    experts: int = 256
    topk: int = 8


def make_weights(config, seed=0, dtype=torch.bfloat16):
    """The whole model's weights on the cpu: router ``[H, E]`` fp32, gate-up ``[E, H, 2F]``, down ``[E, F, H]``."""
    gen = torch.Generator().manual_seed(seed)
    H, F_, E = config.hidden, config.intermediate, config.experts
    router = torch.randn((H, E), generator=gen) / H ** 0.5
    gate_up = (torch.randn((E, H, 2 * F_), generator=gen) / H ** 0.5).to(dtype)
    down = (torch.randn((E, F_, H), generator=gen) / F_ ** 0.5).to(dtype)
    return router, gate_up, down


def grouped_mm(rows, weights, meta):
    """``out[r] = rows[r] @ weights[l]`` for the rows ``meta.slice_offs[l] : meta.slice_offs[l + 1]``; rows past
    the last offset are unspecified. ``torch._grouped_mm`` reads the offsets on the device (no host
    synchronisation); without it, or where it refuses the shapes (it wants 16-byte aligned rows and columns), one
    matmul per expert, with the offsets read on the host."""
    fused = private.grouped_mm()
    aligned = rows.shape[1] * rows.element_size() % 16 == 0 and weights.shape[2] * weights.element_size() % 16 == 0
    if fused is not None and weights.shape[0] and aligned:
        return fused(rows, weights, offs=meta.slice_offs[1:])
    out = rows.new_empty((rows.shape[0], weights.shape[2]))
    offs = meta.slice_offs.tolist()
    for l in range(weights.shape[0]):
        out[offs[l]:offs[l + 1]] = rows[offs[l]:offs[l + 1]] @ weights[l]
    return out


def experts_mlp(rows, gate_up, down, meta):
    """SwiGLU experts over ragged rows: ``silu(g) * u`` of ``rows @ gate_up[e]``, then ``@ down[e]``."""
    g, u = grouped_mm(rows, gate_up, meta).chunk(2, dim=1)
    return grouped_mm((F.silu(g.float()) * u.float()).to(rows.dtype).contiguous(), down, meta)


class ExpertParallelMoE:
    """The layer on one rank of ``group``: ``layer(x)`` for this rank's ``x [T, H]``, ``T <= max_tokens``.
    Collective (every member calls it, in the same order); see the module docstring for the steps."""

    def __init__(self, ctx, config=MoEConfig(), max_tokens=4096, seed=0, group=None, validate=True):
        self.config = config
        dev = ctx.get_device()
        self.dispatcher = ctx.ccl.moe_dispatcher(config.hidden, config.experts, config.topk, max_tokens, group=group,
                                                 config=MoEDispatchConfig(validate=validate))
        me = self.dispatcher._sync.index
        mine = (owners(self.dispatcher.expt_assignment) == me).nonzero().flatten()
        router, gate_up, down = make_weights(config, seed)
        self.router = router.to(dev)
        self.gate_up = gate_up[mine].contiguous().to(dev)
        self.down = down[mine].contiguous().to(dev)

    def __call__(self, x):
        route = topk(x.float() @ self.router, self.config.topk)
        buf, meta, handle = self.dispatcher.dispatch(x, route.indx, route.vals)
        y = experts_mlp(buf, self.gate_up, self.down, meta)
        return self.dispatcher.combine(y, handle, weighted=True)


def reference(x, config=MoEConfig(), seed=0):
    """The same layer on one device: every expert's weights, each token's k rows through them, summed in fp32 in
    the top-k slot order and rounded once."""
    router, gate_up, down = (w.to(x.device) for w in make_weights(config, seed))
    route = topk(x.float() @ router, config.topk)
    acc = torch.zeros(x.shape, dtype=torch.float32, device=x.device)
    for j in range(config.topk):
        e = route.indx[:, j].to(torch.int64)
        g, u = torch.bmm(x[:, None, :], gate_up[e]).squeeze(1).chunk(2, dim=1)
        h = (F.silu(g.float()) * u.float()).to(x.dtype)
        y = torch.bmm(h[:, None, :], down[e]).squeeze(1)
        acc = acc + y.float() * route.vals[:, j:j + 1].float()
    return acc.to(x.dtype)
