"""A torch.distributed program on iris kernels: ``import iris.distributed`` and ``init_process_group("iris")``.

Nothing else changes: ordinary tensors, torch's calls. The backend stages the tensors through a heap buffer of
its own (tensors already on the heap skip it), and torch's functional collectives work on the group too,
inside ``torch.compile`` as well. Beside a default group of another backend, ``dist.new_group(backend="iris")``
makes an iris group instead.

    python examples/50_torch_distributed.py [--world-size 2]
"""

import argparse

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as fc

import iris
import iris.distributed  # registers the "iris" backend

iris.set_logger_level(iris.INFO)  # the ranks print their ctx.info lines as HH:MM:SS INFO [Iris] [rank/world] ...


def main(n=1000):
    dist.init_process_group("iris")  # every rank; the backend creates its iris context on first use
    group = dist.group.WORLD
    rank, world_size = dist.get_rank(), dist.get_world_size()
    device = "cpu" if iris.platform.backend.BACKEND == "cpu" else torch.device("cuda", torch.cuda.current_device())
    grads = torch.arange(n, dtype=torch.float32, device=device) * (rank + 1)
    dist.all_reduce(grads, group=group)  # sum over ranks: arange * (1 + 2 + ... + world_size)
    expected = torch.arange(n, dtype=torch.float32, device=device) * (world_size * (world_size + 1) // 2)
    assert torch.equal(grads, expected)

    shards = fc.all_gather_tensor(torch.full((4,), float(rank), device=device), 0, group)  # functional
    assert torch.equal(shards.wait().cpu(), torch.arange(world_size).repeat_interleave(4).float())
    if rank == 0:
        ctx = iris.distributed.get_context()
        ctx.info(f"torch_distributed: all_reduce of {n} floats and a functional all_gather on the iris backend "
                 f"({ctx.get_num_ranks()} ranks)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--world-size", type=int, default=2)
    iris.run(main, parser.parse_args().world_size)
