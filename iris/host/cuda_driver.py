"""The few CUDA driver calls the heap needs, through ctypes: the only vendor-specific module.

An AMD backend replaces this file with the HIP equivalents (``hipIpcGetMemHandle`` and friends).
"""

import ctypes

CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1
IPC_HANDLE_BYTES = 64

_lib = None


class _IpcMemHandle(ctypes.Structure):
    # Raw bytes (c_ubyte, not c_char: a c_char array field reads back as bytes cut at the first NUL).
    _fields_ = [("reserved", ctypes.c_ubyte * IPC_HANDLE_BYTES)]


def _driver():
    global _lib
    if _lib is None:
        try:
            _lib = ctypes.CDLL("libcuda.so.1")
        except OSError as e:
            raise RuntimeError(f"iris: the cuda backend needs the NVIDIA driver (libcuda.so.1): {e}") from e
    return _lib


def _fn(name):
    lib = _driver()
    # The header maps several names to versioned symbols (cuIpcOpenMemHandle -> cuIpcOpenMemHandle_v2).
    for symbol in (name + "_v2", name):
        if hasattr(lib, symbol):
            return getattr(lib, symbol)
    raise RuntimeError(f"iris: the CUDA driver has no {name}")


def _check(result, what):
    if result != 0:
        message = ctypes.c_char_p()
        _driver().cuGetErrorString(result, ctypes.byref(message))
        text = message.value.decode() if message.value else "unknown error"
        raise RuntimeError(f"iris: {what} failed with CUDA error {result} ({text})")


def allocation_range(ptr):
    """Base address and size of the driver allocation that contains ``ptr``."""
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    _check(_fn("cuMemGetAddressRange")(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(ptr)),
           "cuMemGetAddressRange")
    return base.value, size.value


def ipc_handle(ptr):
    """The 64-byte IPC handle of the allocation that contains ``ptr``."""
    handle = _IpcMemHandle()
    _check(_fn("cuIpcGetMemHandle")(ctypes.byref(handle), ctypes.c_uint64(ptr)), "cuIpcGetMemHandle")
    return bytes(handle)


def ipc_open(handle_bytes):
    """Map a peer's allocation into this process; returns its local base address."""
    handle = _IpcMemHandle.from_buffer_copy(handle_bytes)
    ptr = ctypes.c_uint64()
    _check(_fn("cuIpcOpenMemHandle")(ctypes.byref(ptr), handle, ctypes.c_uint(CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)),
           "cuIpcOpenMemHandle")
    return ptr.value


def ipc_close(ptr):
    _check(_fn("cuIpcCloseMemHandle")(ctypes.c_uint64(ptr)), "cuIpcCloseMemHandle")


CU_MEMORYTYPE_HOST, CU_MEMORYTYPE_DEVICE = 1, 2


class _Memcpy2D(ctypes.Structure):
    # CUDA_MEMCPY2D; ctypes pads after each CUmemorytype enum as the C compiler does.
    _fields_ = [("srcXInBytes", ctypes.c_size_t), ("srcY", ctypes.c_size_t), ("srcMemoryType", ctypes.c_int),
                ("srcHost", ctypes.c_void_p), ("srcDevice", ctypes.c_uint64), ("srcArray", ctypes.c_void_p),
                ("srcPitch", ctypes.c_size_t),
                ("dstXInBytes", ctypes.c_size_t), ("dstY", ctypes.c_size_t), ("dstMemoryType", ctypes.c_int),
                ("dstHost", ctypes.c_void_p), ("dstDevice", ctypes.c_uint64), ("dstArray", ctypes.c_void_p),
                ("dstPitch", ctypes.c_size_t),
                ("WidthInBytes", ctypes.c_size_t), ("Height", ctypes.c_size_t)]


def copy_to_device_2d(dst, dst_pitch, src, src_pitch, width, height, stream):
    """Copy ``height`` rows of ``width`` bytes from host address ``src`` to device address ``dst`` on
    ``stream`` (a ``cudaStream_t``): one copy-engine transfer however strided, unlike ``Tensor.copy_`` into
    a strided view, which launches a kernel. Uses the calling thread's current context."""
    copy = _Memcpy2D(srcMemoryType=CU_MEMORYTYPE_HOST, srcHost=src, srcPitch=src_pitch,
                     dstMemoryType=CU_MEMORYTYPE_DEVICE, dstDevice=dst, dstPitch=dst_pitch,
                     WidthInBytes=width, Height=height)
    _check(_fn("cuMemcpy2DAsync")(ctypes.byref(copy), ctypes.c_void_p(stream)), "cuMemcpy2DAsync")
