"""Device helpers shared by the collective kernels."""

import triton
import triton.language as tl


@triton.jit
def program_row(flags, world_size):
    """This program's row of the group's sync flags (row 0 belongs to ``device_barrier``)."""
    return flags + (tl.program_id(0) + 1) * world_size


@triton.jit
def peer_at(members, group_index, i, GROUP_SIZE: tl.constexpr):
    """The ``i``-th member counting from ourselves: each rank starts on a different peer, spreading links."""
    return tl.load(members + (group_index + i) % GROUP_SIZE)


@triton.jit
def combine(acc, x, OP: tl.constexpr):
    if OP == "max":
        return tl.maximum(acc, x)
    elif OP == "min":
        return tl.minimum(acc, x)
    else:  # sum, avg
        return acc + x


@triton.jit
def finish(acc, OP: tl.constexpr, GROUP_SIZE: tl.constexpr):
    if OP == "avg":
        return acc / GROUP_SIZE
    else:
        return acc
