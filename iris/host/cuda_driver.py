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


def copy_2d(dst, dst_pitch, src, src_pitch, width, height, stream, from_host=False):
    """Copy ``height`` rows of ``width`` bytes from address ``src`` (host memory with ``from_host``, else device
    memory, a peer's mapped heap included) to device address ``dst`` on ``stream`` (a ``cudaStream_t``): one
    copy-engine transfer however strided, unlike ``Tensor.copy_`` into a strided view, which launches a kernel.
    Uses the calling thread's current context."""
    kind = CU_MEMORYTYPE_HOST if from_host else CU_MEMORYTYPE_DEVICE
    copy = _Memcpy2D(srcMemoryType=kind, srcPitch=src_pitch, dstMemoryType=CU_MEMORYTYPE_DEVICE, dstDevice=dst,
                     dstPitch=dst_pitch, WidthInBytes=width, Height=height)
    if from_host:
        copy.srcHost = src
    else:
        copy.srcDevice = src
    _check(_fn("cuMemcpy2DAsync")(ctypes.byref(copy), ctypes.c_void_p(stream)), "cuMemcpy2DAsync")


# Stream memory operations: the stream's front end reads or writes one 32-bit word, no kernel involved.
CU_STREAM_WAIT_VALUE_GEQ = 0x0  # wait until (int32)(*addr - value) >= 0: counts that only grow, wrapping
CU_STREAM_WRITE_VALUE_DEFAULT = 0x0  # the write is fenced after the stream's earlier memory operations


def stream_wait_at_least(stream, address, value):
    """Queue on ``stream``: hold later work until the int32 at device address ``address`` reaches ``value``."""
    _check(_fn("cuStreamWaitValue32")(ctypes.c_void_p(stream), ctypes.c_uint64(address),
                                      ctypes.c_uint32(value & 0xFFFFFFFF), ctypes.c_uint(CU_STREAM_WAIT_VALUE_GEQ)),
           "cuStreamWaitValue32")


def stream_write(stream, address, value):
    """Queue on ``stream``: write the int32 ``value`` at device address ``address`` (a peer's mapped heap too),
    after everything queued before it, copies included, is visible."""
    _check(_fn("cuStreamWriteValue32")(ctypes.c_void_p(stream), ctypes.c_uint64(address),
                                       ctypes.c_uint32(value & 0xFFFFFFFF),
                                       ctypes.c_uint(CU_STREAM_WRITE_VALUE_DEFAULT)),
           "cuStreamWriteValue32")
