"""A Llama-style decoder split tensor-parallel over the ranks of a group, with the communication pluggable.

Each rank holds 1/W of the attention heads (q, k and v columns, the matching rows of the output projection) and
1/W of the MLP's intermediate columns (gate, up) and rows (down), Megatron-style. A layer, on every rank:

    h = rmsnorm(x)                                   (residual stream x, normalised input h)
    qkv = comm.column(h, w_qkv)                      our heads' q, k, v for every token
    o = attention(qkv)                               rope, KV cache, causal SDPA; our heads
    h, x = comm.row(o, w_o, x, mlp_norm)             partial sums of o @ w_o over the ranks, + x, then the norm
    gu = comm.column(h, w_gate_up)
    h, x = comm.row(silu(g) * u, w_down, x, next layer's attn_norm, or the final norm)

``comm`` (``iris/models/comm.py``) decides how: all-reduce the row outputs (every rank holds every token), or,
for prefill, sequence-parallel (each rank holds 1/W of the tokens of x and h; ``column`` all-gathers them into
its matrix product and ``row`` reduce-scatters its product). The model code is the same for every provider and
for the single-rank reference (``NoComm`` with one rank).

Weights are random, drawn from seeded generators on the weights' device, whole, and then sliced: every world
size sees the same model. Weights are stored [in, out] so that every projection is ``x @ w``.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class LlamaConfig:
    """Llama-3-8B's shapes by default (``layers`` of its 32)."""

    hidden: int = 4096
    intermediate: int = 14336
    heads: int = 32
    kv_heads: int = 8
    layers: int = 8
    eps: float = 1e-5
    rope_theta: float = 500000.0
    max_positions: int = 16384 + 1024

    def __post_init__(self):
        for name in ("hidden", "intermediate", "heads", "kv_heads", "layers", "max_positions"):
            if getattr(self, name) < 1:
                raise ValueError(f"LlamaConfig: {name}={getattr(self, name)} must be >= 1")
        if self.hidden % self.heads or (self.hidden // self.heads) % 2:
            raise ValueError(f"LlamaConfig: hidden={self.hidden} must split into heads={self.heads} heads of an "
                             "even size (rope rotates pairs)")
        if self.heads % self.kv_heads:
            raise ValueError(f"LlamaConfig: heads={self.heads} must be a multiple of kv_heads={self.kv_heads}")

    @property
    def head_dim(self):
        return self.hidden // self.heads

    @classmethod
    def toy(cls, layers=2, max_positions=64):
        """A few thousand weights: runs on the cpu backend in seconds."""
        return cls(hidden=64, intermediate=96, heads=4, kv_heads=2, layers=layers, max_positions=max_positions)


def rms_norm(x, weight, eps):
    """torch's RMSNorm over the last dim: fp32 inside, the input's dtype out."""
    return F.rms_norm(x.float(), (x.shape[-1],), weight.float(), eps).to(x.dtype)


class KVCache:
    """This rank's keys and values: [layers, batch, kv heads / W, max_len, head_dim] each."""

    def __init__(self, config, world_size, batch, max_len, dtype, device):
        shape = (config.layers, batch, config.kv_heads // world_size, max_len, config.head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)

    def fill_random(self, length, seed):
        """Random keys and values in positions [0, length): a cache as a prefill of that length leaves it."""
        gen = torch.Generator(device=self.k.device).manual_seed(seed)
        for t in (self.k, self.v):
            t[..., :length, :].normal_(generator=gen)


class Layer:
    def __init__(self, **weights):
        self.__dict__.update(weights)


class TensorParallelLlama:
    """The decoder's layers on one rank of ``comm``'s group. ``forward(x, cache, start)`` maps hidden states
    x [batch, tokens, hidden] (the same on every rank) to the final norm's output, the same on every rank.
    The returned tensor may be a buffer of ``comm`` that the next call overwrites."""

    def __init__(self, config, comm, dtype=torch.bfloat16, device="cpu", seed=0):
        world, rank = comm.world_size, comm.rank
        for name, total in (("heads", config.heads), ("kv_heads", config.kv_heads),
                            ("intermediate", config.intermediate)):
            if total % world:
                raise ValueError(f"TensorParallelLlama: {name}={total} is not divisible by the {world} ranks; use "
                                 f"a world size that divides it")
        self.config, self.comm, self.dtype, self.device = config, comm, dtype, torch.device(device)
        self.local_heads, self.local_kv_heads = config.heads // world, config.kv_heads // world
        H, I, D = config.hidden, config.intermediate, config.head_dim
        q_cols = _shard(config.heads * D, world, rank)
        kv_cols = _shard(config.kv_heads * D, world, rank)
        i_cols = _shard(I, world, rank)
        draw = _Draw(seed, self.device)
        self.layers = []
        for _ in range(config.layers):
            wq, wk, wv = draw((H, config.heads * D), H), draw((H, config.kv_heads * D), H), \
                draw((H, config.kv_heads * D), H)
            wo = draw((config.heads * D, H), config.heads * D)
            wg, wu, wd = draw((H, I), H), draw((H, I), H), draw((I, H), I)
            self.layers.append(Layer(
                attn_norm=draw.norm(H).to(dtype), mlp_norm=draw.norm(H).to(dtype),
                w_qkv=torch.cat([wq[:, q_cols], wk[:, kv_cols], wv[:, kv_cols]], 1).to(dtype).contiguous(),
                w_o=wo[q_cols].to(dtype).contiguous(),
                w_gate_up=torch.cat([wg[:, i_cols], wu[:, i_cols]], 1).to(dtype).contiguous(),
                w_down=wd[i_cols].to(dtype).contiguous()))
            del wq, wk, wv, wo, wg, wu, wd
        self.final_norm = draw.norm(H).to(dtype)
        inv_freq = 1.0 / config.rope_theta ** (torch.arange(0, D, 2, device=self.device, dtype=torch.float64) / D)
        angles = torch.outer(torch.arange(config.max_positions, device=self.device, dtype=torch.float64), inv_freq)
        angles = torch.cat([angles, angles], -1)  # [max_positions, head_dim]
        self.cos, self.sin = angles.cos().float(), angles.sin().float()

    def new_cache(self, batch, max_len):
        return KVCache(self.config, self.comm.world_size, batch, max_len, self.dtype, self.device)

    def forward(self, x, cache=None, start=0):
        """x [batch, tokens, hidden]; ``cache`` (from ``new_cache``) takes the tokens' keys and values at
        positions [start, start + tokens) and attention reads positions [0, start + tokens) from it. Several
        tokens (prefill) attend causally and need ``start == 0``."""
        B, T, H = x.shape
        cfg = self.config
        if H != cfg.hidden:
            raise ValueError(f"TensorParallelLlama.forward: x has hidden size {H}, the model {cfg.hidden}")
        if T > 1 and start != 0:
            raise ValueError(f"TensorParallelLlama.forward: {T} tokens at start={start}; several tokens are a "
                             "prefill, which starts at 0 (decode one token at a time)")
        if start + T > cfg.max_positions:
            raise ValueError(f"TensorParallelLlama.forward: positions up to {start + T} pass max_positions="
                             f"{cfg.max_positions}; raise it in the LlamaConfig")
        comm = self.comm
        rows = x.reshape(B * T, H)
        sequence_parallel = comm.sequence_parallel(B * T)
        # the residual stream belongs to the model: providers may update it in place
        x = comm.scatter_rows(rows) if sequence_parallel else rows.clone()
        h = rms_norm(x, self.layers[0].attn_norm, cfg.eps)
        for i, layer in enumerate(self.layers):
            next_norm = self.layers[i + 1].attn_norm if i + 1 < len(self.layers) else self.final_norm
            qkv = comm.column(h, layer.w_qkv, sequence_parallel)  # [B * T, (heads + 2 kv_heads) / W * D]
            o = self._attention(qkv, B, T, start, cache, i)  # [B * T, heads / W * D]
            h, x = comm.row(o, layer.w_o, x, layer.mlp_norm, cfg.eps, sequence_parallel)
            gate, up = comm.column(h, layer.w_gate_up, sequence_parallel).chunk(2, dim=-1)  # [B * T, I / W] each
            h, x = comm.row(F.silu(gate) * up, layer.w_down, x, next_norm, cfg.eps, sequence_parallel)
        out = comm.gather_rows(h) if sequence_parallel else h
        return out.view(B, T, H)

    def _attention(self, qkv, B, T, start, cache, layer):
        hq, hkv, D = self.local_heads, self.local_kv_heads, self.config.head_dim
        q, k, v = qkv.view(B, T, hq + 2 * hkv, D).split([hq, hkv, hkv], dim=2)  # [B, T, heads, D]
        cos, sin = self.cos[start:start + T, None], self.sin[start:start + T, None]  # [T, 1, D]
        q, k = _rope(q, cos, sin), _rope(k, cos, sin)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, heads, T, D]
        if cache is not None:
            cache.k[layer, :, :, start:start + T] = k
            cache.v[layer, :, :, start:start + T] = v
            k, v = cache.k[layer, :, :, :start + T], cache.v[layer, :, :, :start + T]
        o = F.scaled_dot_product_attention(q, k, v, is_causal=T > 1, enable_gqa=hq != hkv)  # [B, hq, T, D]
        return o.transpose(1, 2).reshape(B * T, hq * D)


def _rope(x, cos, sin):
    """Rotate pairs (i, i + D/2) of each head by the position's angles, in fp32."""
    xf = x.float()
    x1, x2 = xf.chunk(2, dim=-1)
    return (xf * cos + torch.cat([-x2, x1], -1) * sin).to(x.dtype)


def _shard(total, world, rank):
    size = total // world
    return slice(rank * size, (rank + 1) * size)


class _Draw:
    """Seeded random weights on ``device``: each tensor from its own generator state, so the draw is the same
    whatever the dtype and world size."""

    def __init__(self, seed, device):
        self.gen = torch.Generator(device=device).manual_seed(seed)
        self.device = device

    def __call__(self, shape, fan_in):
        return torch.randn(shape, generator=self.gen, device=self.device) / fan_in ** 0.5

    def norm(self, size):
        return 1 + 0.1 * torch.randn(size, generator=self.gen, device=self.device)
