"""Reaching a peer's heap without iris's device API: the baselines' way in.

The baselines must move the same bytes as iris but the way a user would without the library, so they
need the peer's address of a heap tensor on the host. It is one subtraction and one addition over
``ctx.get_heap_bases()`` (``allocate_symmetric`` returns the same numbers); this is the one place outside
``iris.translate`` that computes a remote address, on purpose: it is the thing being compared against.

The copy-engine baseline wraps that address in a torch tensor. The peer's heap is already mapped into
this process (CUDA IPC, or shared memory on the cpu backend), so no new mapping is needed: we build a
non-owning storage over the address on *our own* device, the same way ``torch._inductor``'s CUDA-graph
trees rebuild storages from pointers. ``view.copy_(src)`` is then a same-device contiguous copy, which
torch issues as one ``cudaMemcpyAsync(DeviceToDevice)`` on the current stream; with unified addressing
the driver sees that the destination lives on the peer GPU and runs it on a copy engine over NVLink.
It is graph-capturable (a memcpy node) and timed with events on our stream like every other provider.
"""

import weakref

import torch

_HOST_BASES = weakref.WeakKeyDictionary()  # Iris -> heap bases as Python ints (fixed for a context's life)


def peer_address(ctx, tensor, peer):
    """Address, in this process, of ``tensor``'s symmetric counterpart on rank ``peer``."""
    ctx.check_symmetric(tensor, "peer_address")
    ctx.check_rank(peer, "peer_address", "peer")
    bases = _host_bases(ctx)
    return tensor.data_ptr() - bases[ctx.get_rank()] + bases[peer]


def peer_view(ctx, tensor, peer):
    """A tensor of ``tensor``'s shape and dtype viewing its counterpart on ``peer`` (writes land there)."""
    if not tensor.is_contiguous():
        raise ValueError("peer_view: tensor must be contiguous; take the view of a contiguous heap tensor")
    address = peer_address(ctx, tensor, peer)
    nbytes = tensor.numel() * tensor.element_size()
    device = ctx.get_device()
    construct = getattr(torch._C, "_construct_storage_from_data_pointer", None)
    if construct is not None:
        storage = construct(address, device, nbytes)
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


def _host_bases(ctx):
    if ctx not in _HOST_BASES:
        _HOST_BASES[ctx] = ctx.get_heap_bases().tolist()
    return _HOST_BASES[ctx]
