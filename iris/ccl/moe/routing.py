"""Routing descriptions for expert-parallel MoE: who owns which expert, and where each expert's rows lie.

``ExptAssignment`` and ``RaggedTensorMetadata`` carry upstream Iris's fields, so code written against its
``iris.ccl.moe.routing`` runs unchanged; ``topk`` is the router's selection (softmax over the chosen logits).
"""

from dataclasses import dataclass

import torch


@dataclass
class ExptAssignment:
    """Which shard (group rank) owns each of the ``E`` experts; every expert has exactly one owner.

    ``expt_bitmask`` int32 ``[W, ceil(E / 32)]``: bit ``e % 32`` of word ``e // 32`` of row ``s`` is set iff shard s
    owns expert e. ``expt_boolmask`` bool ``[W, E]``: the same as booleans. ``expt_map`` int32 ``[W, E]``: the
    expert's local id on shard s (its position among s's experts in ascending global id), or -1.
    ``n_expts_per_shard``: how many experts each shard owns."""

    expt_bitmask: torch.Tensor
    expt_boolmask: torch.Tensor
    expt_map: torch.Tensor
    n_expts_per_shard: list


def make_expt_dict_uniform(n_shards, n_expts_tot):
    """Contiguous blocks: shard s owns experts ``[s * E / W, (s + 1) * E / W)``."""
    if n_shards <= 0 or n_expts_tot % n_shards:
        raise ValueError(f"make_expt_dict_uniform: {n_expts_tot} experts do not split evenly over {n_shards} shards; "
                         "pass an expert dict of your own to make_expt_assignment")
    per = n_expts_tot // n_shards
    return {s: list(range(s * per, (s + 1) * per)) for s in range(n_shards)}


def make_expt_assignment(n_shards, n_expts_tot, expt_dict, device):
    """The ``ExptAssignment`` of ``expt_dict`` (shard -> list of global expert ids), checked: shards in
    ``[0, n_shards)``, ids in ``[0, n_expts_tot)``, each expert owned exactly once. A shard may own no expert."""
    owner = torch.full((n_expts_tot,), -1, dtype=torch.int64)
    for shard, experts in expt_dict.items():
        if not 0 <= shard < n_shards:
            raise ValueError(f"make_expt_assignment: shard {shard} is outside [0, {n_shards})")
        for e in experts:
            if not 0 <= e < n_expts_tot:
                raise ValueError(f"make_expt_assignment: expert {e} of shard {shard} is outside [0, {n_expts_tot})")
            if owner[e] >= 0:
                raise ValueError(f"make_expt_assignment: expert {e} is owned by shards {int(owner[e])} and {shard}; "
                                 "each expert needs exactly one owner")
            owner[e] = shard
    missing = (owner < 0).nonzero().flatten().tolist()
    if missing:
        raise ValueError(f"make_expt_assignment: experts {missing[:8]} have no owner; each expert needs exactly one")
    boolmask = torch.zeros((n_shards, n_expts_tot), dtype=torch.bool)
    boolmask[owner, torch.arange(n_expts_tot)] = True
    expt_map = torch.full((n_shards, n_expts_tot), -1, dtype=torch.int32)
    words = (n_expts_tot + 31) // 32
    bitmask = torch.zeros((n_shards, words), dtype=torch.int64)
    for s in range(n_shards):
        mine = boolmask[s].nonzero().flatten()
        expt_map[s, mine] = torch.arange(mine.numel(), dtype=torch.int32)
        for e in mine.tolist():
            bitmask[s, e // 32] |= 1 << (e % 32)
    bitmask = torch.where(bitmask >= 1 << 31, bitmask - (1 << 32), bitmask).to(torch.int32)  # bit 31: sign bit
    counts = boolmask.sum(1).tolist()
    return ExptAssignment(bitmask.to(device), boolmask.to(device), expt_map.to(device), counts)


def owners(assignment):
    """int64 ``[E]``: the shard that owns each expert (host tensor)."""
    return assignment.expt_boolmask.to("cpu").to(torch.int8).argmax(0)


@dataclass
class RaggedTensorMetadata:
    """Rows of several experts in one buffer: expert l's rows are ``buf[slice_offs[l] : slice_offs[l] +
    slice_sizes[l]]``. int32 device tensors ``slice_sizes [L]`` and ``slice_offs [L + 1]`` (``slice_offs[L]`` is
    the rows in use). Sizes ``[3, 0, 5, 2]`` have offsets ``[0, 3, 3, 8, 10]``."""

    slice_sizes: torch.Tensor
    slice_offs: torch.Tensor

    @property
    def n_slices(self):
        return self.slice_sizes.shape[0]


def make_ragged_tensor_metadata(slice_sizes, n_total_rows=None):
    """Offsets of ``slice_sizes`` laid end to end from row 0 (``n_total_rows`` is upstream's, unused)."""
    sizes = slice_sizes.to(torch.int32)
    offs = torch.zeros(sizes.shape[0] + 1, dtype=torch.int32, device=sizes.device)
    offs[1:] = torch.cumsum(sizes, 0)
    return RaggedTensorMetadata(sizes, offs)


@dataclass
class TopkResult:
    vals: torch.Tensor  # [T, k] gate weights
    indx: torch.Tensor  # [T, k] int16 expert ids


def topk(x, k, apply_softmax=True):
    """The router's choice on logits ``x [T, E]``: the ``k`` largest per token (ids int16, in descending order of
    the logit), their weights softmaxed over the chosen ``k`` in fp32, returned in ``x``'s dtype."""
    vals, indx = torch.topk(x.float(), k, dim=1, sorted=True)
    if apply_softmax:
        vals = torch.softmax(vals, dim=-1)
    return TopkResult(vals=vals.to(x.dtype), indx=indx.to(torch.int16))
