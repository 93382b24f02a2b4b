"""Torch references for the tile collectives, over whole tensors: what every tile of a kernel that walks all tiles
adds up to. ``inputs`` is every rank's tensor, in rank order."""

import torch


def all_reduce(inputs):
    """Sum in rank order 0..W-1 in float64, as the deterministic tile schedules promise to match within rounding."""
    total = inputs[0].double()
    for x in inputs[1:]:
        total = total + x.double()
    return total


def all_gather(inputs, dim):
    """``torch.cat`` of the ranks' local results along ``dim``."""
    return torch.cat(inputs, dim=dim)


def all_to_all(inputs, rank):
    """Rank ``rank``'s output: block ``rank`` of each rank's input columns, in rank order."""
    world = len(inputs)
    return torch.cat([x.chunk(world, dim=1)[rank] for x in inputs], dim=1)


def reduce_scatter_mask(M, N, block_m, block_n, rank, world):
    """[M, N] bool: the elements of the tiles ``rank`` owns (contiguous tile blocks, the last rank the rest)."""
    tiles_n = -(-N // block_n)
    total = -(-M // block_m) * tiles_n
    per_rank = total // world
    start, end = rank * per_rank, total if rank == world - 1 else (rank + 1) * per_rank
    tile = (torch.arange(M)[:, None] // block_m) * tiles_n + torch.arange(N)[None, :] // block_n
    return (tile >= start) & (tile < end)
