"""Peers' views of a heap tensor on the host: the address of its counterpart on a peer (``peer_address``), and a
tensor over it (``peer_view``) that torch's copies (a copy engine over NVLink on GPUs) write straight into the peer's
heap. The host's side of ``translate``; the copy engines and the benchmarks' baselines use them."""

import torch

from iris.host.distributed import Context
from iris.platform import private


def peer_address(ctx: Context, tensor: torch.Tensor, peer: int) -> int:
    """Address, in this process, of ``tensor``'s symmetric counterpart on rank ``peer``: the host's ``translate``, for
    ``ctx.put_tile``'s ``to_ptr``. Local.

    Raises ``ValueError`` when ``tensor`` is not on the heap, or ``peer`` is out of range or on another node.

    Example::

        from iris.copy_engine import peer_address

        x = ctx.zeros(64)
        peer, bases = (rank + 1) % world_size, ctx.get_heap_bases()
        address = peer_address(ctx, x, peer)
        assert address - int(bases[peer]) == x.data_ptr() - int(bases[rank])  # the same offset in every heap
    """
    operand = ctx.on_heap(tensor, "peer_address")
    ctx.check_direct(peer, "peer_address", "peer")
    return operand.at(peer)


def peer_view(ctx, tensor, peer):
    """A tensor of ``tensor``'s shape and dtype viewing its counterpart on ``peer`` (writes land there).

    The peer's heap is already mapped into this process (CUDA IPC, or shared memory on the cpu backend), so
    this builds a non-owning storage over the address on our own device, as ``torch._inductor``'s CUDA-graph
    trees rebuild storages from pointers. A contiguous ``view.copy_(src)`` is then one ``cudaMemcpyAsync``,
    which the driver runs on a copy engine over NVLink."""
    if not tensor.is_contiguous():
        raise ValueError("peer_view: tensor must be contiguous; take the view of a contiguous heap tensor")
    address = peer_address(ctx, tensor, peer)
    nbytes = tensor.numel() * tensor.element_size()
    device = ctx.get_device()
    storage = private.construct_storage(address, device, nbytes)
    if storage is not None:
        return torch.empty(0, dtype=tensor.dtype, device=device).set_(storage, 0, tensor.shape, tensor.stride())
    return _view_from_interface(address, tensor, device)


def _view_from_interface(address, tensor, device):
    """Fallback for a torch without the private constructor: the array interfaces torch imports zero-copy."""
    if device.type == "cuda":
        class _Interface:
            __cuda_array_interface__ = {"data": (address, False), "shape": tuple(tensor.shape),
                                        "typestr": _typestr(tensor), "version": 3, "strides": None}

        view = torch.as_tensor(_Interface(), device=device)
    else:
        import ctypes

        import numpy as np

        nbytes = tensor.numel() * tensor.element_size()
        raw = np.ctypeslib.as_array((ctypes.c_uint8 * nbytes).from_address(address))
        view = torch.from_numpy(raw).view(tensor.dtype).view(tensor.shape)
    if view.data_ptr() != address:
        raise RuntimeError(f"peer_view: torch copied the peer memory instead of viewing it (on {view.device}); "
                           "this torch cannot wrap a raw device address")
    return view


def _typestr(tensor):
    if tensor.dtype == torch.bfloat16:
        raise TypeError("peer_view: bfloat16 has no array-interface type string; view the buffer as int16")
    kind = "f" if tensor.dtype.is_floating_point else "i"
    return f"<{kind}{tensor.element_size()}"
