"""torch references for the fused ops (float64): what the tests compare against. ``a[r]``, ``b[r]`` are rank
r's operands."""

import torch


def matmul_all_reduce(a, b):
    return sum(x.double() @ y.double() for x, y in zip(a, b))


def all_gather_matmul(a, b):
    return torch.cat([x.double() for x in a], dim=0) @ b.double()


def matmul_all_gather(a, b):
    return torch.cat([a.double() @ y.double() for y in b], dim=1)


def matmul_reduce_scatter(a, b, rank):
    return matmul_all_reduce(a, b).chunk(len(a), dim=0)[rank]
