"""torch references for the fused ops (float64): what the tests compare against. Each is ``op(a, b, rank)``: ``a[r]``,
``b[r]`` are rank r's operands, and an operand every rank holds the same may be given as one tensor. The result is
rank ``rank``'s ``out``."""

import torch


def _each(x, like):
    """Every rank's operand: ``x`` itself when it is a list, else ``x`` once for each entry of ``like``."""
    return list(x) if isinstance(x, (list, tuple)) else [x] * len(like)


def matmul_all_reduce(a, b, rank=0):
    return sum(x.double() @ y.double() for x, y in zip(a, b))


def all_gather_matmul(a, b, rank=0):
    return torch.cat([x.double() for x in a], dim=0) @ _each(b, a)[rank].double()


def matmul_all_gather(a, b, rank=0):
    return torch.cat([x.double() @ y.double() for x, y in zip(_each(a, b), b)], dim=1)  # each rank's own product


def matmul_reduce_scatter(a, b, rank=0):
    return matmul_all_reduce(a, b).chunk(len(a), dim=0)[rank]
