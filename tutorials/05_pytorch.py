"""
Drop into PyTorch: the ``"iris"`` backend and ``torch.ops.iris``
=================================================================

A PyTorch program already speaks ``torch.distributed``. ``import iris.distributed`` registers a backend named
``"iris"``: a group made with it runs its collectives on iris's kernels, on ordinary tensors (they are staged through
a heap buffer). ``import iris.compile`` registers functional ops, ``torch.ops.iris.all_reduce`` and the rest, which
``torch.compile(fullgraph=True)`` traces as one node each.
"""

# %%
import torch
import torch.distributed as dist

import iris
import iris.compile
import iris.distributed


# %%
# A row-parallel linear layer: each rank holds a slice of the input features and the matching rows of the weight;
# the partial products are summed over the ranks.
class RowParallelLinear(torch.nn.Module):
    def __init__(self, weight_rows, group):
        super().__init__()
        self.weight, self.group = torch.nn.Parameter(weight_rows, requires_grad=False), group

    def forward(self, x_slice):
        partial = x_slice @ self.weight
        dist.all_reduce(partial, group=self.group)  # on the "iris" group: iris's all_reduce kernel
        return partial


def main(features=32, outputs=16, rows=8):
    ctx = iris.iris(heap_size=1 << 22)
    iris.distributed.set_context(ctx)  # the backend's collectives run on this context
    iris.compile.set_context(ctx)
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    group = dist.new_group(backend="iris")
    gen = torch.Generator().manual_seed(0)
    x, weight = torch.randn(rows, features, generator=gen), torch.randn(features, outputs, generator=gen)
    part = features // world
    layer = RowParallelLinear(weight[rank * part:(rank + 1) * part].clone(), group)
    y = layer(x[:, rank * part:(rank + 1) * part].contiguous())
    assert torch.allclose(y, x @ weight, rtol=1e-4, atol=1e-4)

    # The functional op, eager and compiled (``aot_eager`` traces the graph without inductor's C++ compile).
    def step(t):
        return torch.ops.iris.all_reduce(t * 2) + 1

    t = torch.full((rows,), float(rank + 1))
    expected = torch.full((rows,), 2.0 * sum(range(1, world + 1)) + 1)
    assert torch.equal(step(t), expected)
    assert torch.equal(torch.compile(step, fullgraph=True, backend="aot_eager")(t), expected)
    print(f"rank {rank}: the row-parallel layer and torch.ops.iris.all_reduce match torch")


if __name__ == "__main__":
    iris.run(main, 2)
