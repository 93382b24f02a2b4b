"""Gluon's shared memory and Hopper bulk tensor stores (TMA) in Triton's interpreter, for the cpu backend.

A program runs as one Python thread over whole blocks (``iris/host/gluon_interpreter.py``), so shared memory is a
numpy buffer private to the program, and the asynchronous parts of the hardware are synchronous here:

- ``gl.allocate_shared_memory`` gives a buffer filled with a poison byte (0xA5), so that a tile read before it was
  written shows; ``.index(i)`` is a view along dim 0, ``.store(x)`` / ``.load(layout)`` copy in and out (the layout
  checked as the compiler checks it);
- ``hopper.tma.async_copy_shared_to_global(desc, coord, smem)`` writes the box at ``coord`` of the host-built
  tensor map ``desc`` (Gluon's ``TensorDescriptor``) straight to memory, clipped to the map's shape as TMA clips it;
  the box must be the buffer's shape and the element size the map's;
- ``hopper.fence_async_shared``, ``hopper.tma.store_wait`` and the full ``cp.async.bulk.wait_group`` have nothing to
  wait for: each store is complete when the call returns.

Kernels reach these through their modules (``hopper.fence_async_shared()``, ``tma.async_copy_shared_to_global``):
``install`` patches the module attributes for the length of a launch, as the interpreter patches ``tl``'s.
mbarriers, TMA loads and ``warp_specialize`` are not interpreted.
"""

import numpy as np

POISON_BYTE = 0xA5


def _value(x):
    """An int from a constexpr, an interpreter scalar tensor or an int."""
    x = getattr(x, "value", x)
    handle = getattr(x, "handle", None)
    return int(handle.data.item()) if handle is not None else int(x)


class SharedMemory:
    """A Gluon ``shared_memory_descriptor`` in the interpreter: ``element_ty`` values in a numpy array of the
    interpreter's storage type (bf16 as uint16, as its loads and stores hold them)."""

    def __init__(self, element_ty, data, layout):
        self.element_ty, self.data, self.layout = element_ty, data, layout

    @property
    def shape(self):
        return list(self.data.shape)

    @property
    def dtype(self):
        return self.element_ty

    def index(self, index):
        return SharedMemory(self.element_ty, self.data[_value(index)], self.layout)

    def store(self, value):
        self.data[...] = np.broadcast_to(value.handle.data, self.data.shape)

    def load(self, layout):
        import triton.language as tl
        from triton.runtime.interpreter import TensorHandle

        from iris.host.gluon_interpreter import check_layout

        check_layout(layout, self.shape, "shared_memory_descriptor.load")
        ty = tl.block_type(self.element_ty, self.shape)
        return tl.tensor(TensorHandle(self.data.copy(), self.element_ty), ty)


def allocate(element_ty, shape, layout, value=None):
    """``gl.allocate_shared_memory`` in the interpreter."""
    from triton.runtime.interpreter import _get_np_dtype

    np_dtype = _get_np_dtype(element_ty)
    shape = [_value(s) for s in shape]
    data = np.full(shape + [np_dtype.itemsize], POISON_BYTE, dtype=np.uint8).view(np_dtype).reshape(shape)
    smem = SharedMemory(element_ty, data, layout)
    if value is not None:
        smem.store(value)
    return smem


def tma_store(desc, coord, src, **_):
    """``tma.async_copy_shared_to_global``: the box of ``desc`` at ``coord`` <- ``src``, clipped to the map."""
    from triton._C.libtriton import interpreter as native

    coord = [_value(c) for c in coord]
    if list(desc.block_shape) != src.shape:
        raise ValueError(f"tma.async_copy_shared_to_global: the tensor map's box {list(desc.block_shape)} is not the "
                         f"shared buffer's shape {src.shape}; build the descriptor with block_shape={src.shape}")
    element_size = desc.base.element_size() if hasattr(desc.base, "element_size") else desc.base.dtype.itemsize
    if element_size != src.data.itemsize:
        raise ValueError(f"tma.async_copy_shared_to_global: the tensor map holds {element_size}-byte elements, the "
                         f"shared buffer {src.data.itemsize}-byte ones; use one dtype for both")
    index = np.indices(src.data.shape)  # [rank, *box]
    inside = np.ones(src.data.shape, dtype=bool)
    offset = np.zeros(src.data.shape, dtype=np.int64)
    for d, (start, extent, stride) in enumerate(zip(coord, desc.shape, desc.strides)):
        at = index[d] + start
        inside &= (at >= 0) & (at < extent)
        offset += at * int(stride)
    addresses = (np.int64(desc.base.data_ptr()) + offset * element_size).astype(np.uint64)
    native.store(addresses, np.ascontiguousarray(src.data), inside)


def install(scope):
    """Patch the Hopper modules' bulk-copy entry points in ``scope`` (an interpreter ``_LangPatchScope``)."""
    from triton.experimental.gluon.language.nvidia import hopper
    from triton.experimental.gluon.language.nvidia.hopper import tma

    nothing = lambda *args, **kwargs: None
    scope.set_attr(hopper, "fence_async_shared", nothing)
    scope.set_attr(tma, "store_wait", nothing)
    scope.set_attr(tma, "async_copy_shared_to_global", tma_store)
