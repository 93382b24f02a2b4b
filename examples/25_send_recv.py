"""``ctx.ccl.send`` / ``recv``: move a heap tensor from one rank to another.

Both ranks pass the same heap allocation; the receiver pulls it from the sender, and the sender's call
returns (on its stream) once the data has been copied, so it may then overwrite the buffer. Here a token
travels around the ring, each rank adding its rank to every element before passing it on.

    python examples/25_send_recv.py [--world-size 2] [--n 1000]
"""

import argparse

import torch

import iris  # before triton: on the cpu backend this switches Triton to its interpreter

iris.set_logger_level(iris.INFO)  # the ranks print ctx.info lines as HH:MM:SS INFO [Iris] [rank/world] ...


def main(n):
    ctx = iris.iris(heap_size=1 << 22)
    rank, world_size = ctx.get_rank(), ctx.get_num_ranks()
    token = ctx.zeros(n, dtype=torch.int64)
    if rank == 0:
        token.copy_(torch.arange(n))
    for sender in range(world_size):
        receiver = (sender + 1) % world_size
        if rank == sender:
            token.add_(rank)
            ctx.ccl.send(token, receiver)
        elif rank == receiver:
            ctx.ccl.recv(token, sender)
        ctx.barrier()
    if rank == 0:  # back home, carrying 0 + 1 + ... + (world_size - 1)
        expect = torch.arange(n) + sum(range(world_size))
        assert torch.equal(token.cpu(), expect), "the token came back wrong"
        ctx.info(f"send_recv: a {n}-element token went round {world_size} ranks and came back right")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--n", "--size", dest="n", type=int, default=1000)
    args = parser.parse_args()
    iris.run(main, args.world_size, args.n)
