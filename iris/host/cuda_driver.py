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
