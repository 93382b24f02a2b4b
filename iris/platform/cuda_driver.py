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


def _symbol(name):
    lib = _driver()
    # The header maps several names to versioned symbols (cuIpcOpenMemHandle -> cuIpcOpenMemHandle_v2).
    for symbol in (name + "_v2", name):
        if hasattr(lib, symbol):
            return symbol
    raise RuntimeError(f"iris: the CUDA driver has no {name}")


def _fn(name):
    return getattr(_driver(), _symbol(name))


_BOUND = {}


def _bound(name, *argtypes):
    """``name`` with its argument types declared, so that a call converts plain ints in C (a hot path's calls take
    ~0.3 us, against ~1 us through ctypes objects built in Python)."""
    fn = _BOUND.get(name)
    if fn is None:  # its own function object: _fn's stays untyped
        fn = ctypes.CFUNCTYPE(ctypes.c_int, *argtypes)((_symbol(name), _driver()))
        _BOUND[name] = fn
    return fn


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


def is_device_pointer(ptr):
    """Whether ``ptr`` lies in device memory this process has mapped (``cuMemGetAddressRange`` finds its
    allocation): a peer's memory opened by IPC or VMM counts, host memory and unmapped addresses do not."""
    base, size = ctypes.c_uint64(), ctypes.c_size_t()
    return _fn("cuMemGetAddressRange")(ctypes.byref(base), ctypes.byref(size), ctypes.c_uint64(ptr)) == 0


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
    result = _bound("cuMemcpy2DAsync", ctypes.POINTER(_Memcpy2D), ctypes.c_void_p)(ctypes.byref(copy), stream)
    if result:
        _check(result, "cuMemcpy2DAsync")


# cuMemcpy3DBatchAsync (CUDA 12.8+): many copies in one call. CUDA_MEMCPY3D_BATCH_OP is two CUmemcpy3DOperand
# (an int type and its padding, then a 32-byte union whose pointer form is ptr, rowLength, layerHeight and an 8-byte
# CUmemLocation hint), a CUextent3D (width, height, depth) and two ints (srcAccessOrder, flags): 112 bytes, fourteen
# 8-byte words, which batch_ops fills as little-endian uint64 (x86-64 and aarch64). Pointer operands count in bytes.
CU_MEMCPY_OPERAND_TYPE_POINTER = 1
CU_MEMCPY_SRC_ACCESS_ORDER_STREAM = 1  # the source is read in stream order, as any async copy's
# Each word of an op from a Copy row (dst, dst_pitch, src, src_pitch, width, height) extended by constants ([6] the
# pointer operand type, [7] 0: no location hint, [8] 1: the depth, [9] the stream access order with flags 0):
# src type, ptr, rowLength, layerHeight, hint; dst type, ptr, rowLength, layerHeight, hint; width, height, depth;
# srcAccessOrder | flags << 32
_BATCH_WORDS = [6, 2, 3, 5, 7, 6, 0, 1, 5, 7, 4, 5, 8, 9]
_batch = []  # [(the bound entry point, whether it takes failIdx)] or [None], looked up once


def _batch_entry():
    """The driver's batched 3-D copy: CUDA 13's ``cuMemcpy3DBatchAsync_v2(numOps, ops, flags, stream)``, else 12.8's
    ``cuMemcpy3DBatchAsync(numOps, ops, failIdx, flags, stream)``; None before 12.8."""
    if not _batch:
        lib, size, pointer, flags = _driver(), ctypes.c_size_t, ctypes.c_void_p, ctypes.c_ulonglong
        if hasattr(lib, "cuMemcpy3DBatchAsync_v2"):
            fn = ctypes.CFUNCTYPE(ctypes.c_int, size, pointer, flags, pointer)(("cuMemcpy3DBatchAsync_v2", lib))
            _batch.append((fn, False))
        elif hasattr(lib, "cuMemcpy3DBatchAsync"):
            fn = ctypes.CFUNCTYPE(ctypes.c_int, size, pointer, pointer, flags, pointer)(("cuMemcpy3DBatchAsync", lib))
            _batch.append((fn, True))
        else:
            _batch.append(None)
    return _batch[0]


def batch_ops(copies):
    """The CUDA_MEMCPY3D_BATCH_OP array of ``copies`` (rows of dst, dst_pitch, src, src_pitch, width, height in bytes,
    device pointers; one 2-D copy each) as uint64 [len(copies), 14]: ~0.2 us a copy on a 2-core host."""
    import itertools

    import numpy as np

    rows = np.empty((len(copies), 10), dtype=np.uint64)
    rows[:, :6] = np.fromiter(itertools.chain.from_iterable(copies), dtype=np.uint64,
                              count=6 * len(copies)).reshape(-1, 6)
    rows[:, 6:] = (CU_MEMCPY_OPERAND_TYPE_POINTER, 0, 1, CU_MEMCPY_SRC_ACCESS_ORDER_STREAM)
    return np.ascontiguousarray(rows[:, _BATCH_WORDS])


def copy_2d_batch(copies, stream):
    """Queue ``copies`` (see ``batch_ops``) on ``stream`` in one driver call; they land in no particular order among
    themselves, all before the stream's next work. Returns 0 once queued, -1 where the driver has no batched copy
    (or refused one before: it is not asked again), else the driver's error (the caller then copies one by one: a
    copy that did land is only written again, from the same source). Not under a CUDA graph capture, which the
    batched call refuses (error 900 on an H200)."""
    entry = _batch_entry()
    if entry is None:
        return -1
    fn, fail_index = entry
    ops = batch_ops(copies)
    if fail_index:
        failed = ctypes.c_size_t()
        result = fn(len(ops), ops.ctypes.data, ctypes.addressof(failed), 0, stream)
    else:
        result = fn(len(ops), ops.ctypes.data, 0, stream)
    if result:
        _batch[0] = None
    return result


def copy_1d(dst, src, nbytes, stream):
    """Copy ``nbytes`` from device address ``src`` to ``dst`` (a peer's mapped heap included) on ``stream``: the
    call ``Tensor.copy_`` makes between contiguous tensors, so the driver picks the same engine for the same pair
    of GPUs."""
    result = _bound("cuMemcpyAsync", ctypes.c_uint64, ctypes.c_uint64, ctypes.c_size_t, ctypes.c_void_p)(
        dst, src, nbytes, stream)
    if result:
        _check(result, "cuMemcpyAsync")


def event_create():
    """A ``CUevent`` without timing (recording one is the cheapest ordering point between streams)."""
    event = ctypes.c_void_p()
    _check(_fn("cuEventCreate")(ctypes.byref(event), ctypes.c_uint(CU_EVENT_DISABLE_TIMING)), "cuEventCreate")
    return event.value


def event_destroy(event):
    _fn("cuEventDestroy")(ctypes.c_void_p(event))


def order_after(stream, event, before):
    """Queue on ``stream`` a wait for everything queued on ``before`` so far, through ``event`` (re-recorded: a
    wait takes the record before it)."""
    result = _bound("cuEventRecord", ctypes.c_void_p, ctypes.c_void_p)(event, before)
    if not result:
        result = _bound("cuStreamWaitEvent", ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint)(stream, event, 0)
    if result:
        _check(result, "cuEventRecord/cuStreamWaitEvent")


CU_EVENT_DISABLE_TIMING = 0x2


# Stream memory operations: the stream's front end reads or writes one 32-bit word, no kernel involved.
CU_STREAM_WAIT_VALUE_GEQ = 0x0  # wait until (int32)(*addr - value) >= 0: counts that only grow, wrapping
CU_STREAM_WRITE_VALUE_DEFAULT = 0x0  # the write is fenced after the stream's earlier memory operations


def stream_wait_at_least(stream, address, value):
    """Queue on ``stream``: hold later work until the int32 at device address ``address`` reaches ``value``."""
    result = _bound("cuStreamWaitValue32", ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_uint)(
        stream, address, value & 0xFFFFFFFF, CU_STREAM_WAIT_VALUE_GEQ)
    if result:
        _check(result, "cuStreamWaitValue32")


def stream_write(stream, address, value):
    """Queue on ``stream``: write the int32 ``value`` at device address ``address`` (a peer's mapped heap too),
    after everything queued before it, copies included, is visible."""
    _check(_fn("cuStreamWriteValue32")(ctypes.c_void_p(stream), ctypes.c_uint64(address),
                                       ctypes.c_uint32(value & 0xFFFFFFFF),
                                       ctypes.c_uint(CU_STREAM_WRITE_VALUE_DEFAULT)),
           "cuStreamWriteValue32")


def stream_wait_at_least_64(stream, address, value):
    """``stream_wait_at_least`` on an int64 word (needs ``CAN_USE_64_BIT_STREAM_MEM_OPS``)."""
    result = _bound("cuStreamWaitValue64", ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64, ctypes.c_uint)(
        stream, address, value & 0xFFFFFFFFFFFFFFFF, CU_STREAM_WAIT_VALUE_GEQ)
    if result:
        _check(result, "cuStreamWaitValue64")


CU_STREAM_CAPTURE_MODE_RELAXED = 2


def relax_capture_mode():
    """Let the calling thread's CUDA calls run while another thread captures a graph: a capture in CUDA's default
    global mode forbids every thread's potentially unsafe calls (a synchronize, say) unless the thread is relaxed.
    For a helper thread (the watchdog's reads of the sync flags) whose work is never part of a capture."""
    mode = ctypes.c_int(CU_STREAM_CAPTURE_MODE_RELAXED)
    _check(_fn("cuThreadExchangeStreamCaptureMode")(ctypes.byref(mode)), "cuThreadExchangeStreamCaptureMode")


def current_context():
    """The calling thread's current ``CUcontext`` (an int), to make current in another thread."""
    context = ctypes.c_void_p()
    _check(_fn("cuCtxGetCurrent")(ctypes.byref(context)), "cuCtxGetCurrent")
    return context.value


def set_current_context(context):
    """Make ``context`` current in the calling thread: thread-local, it waits for nothing on the device (unlike a
    runtime call that may first initialise state)."""
    _check(_fn("cuCtxSetCurrent")(ctypes.c_void_p(context)), "cuCtxSetCurrent")


CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT = 40
CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES = 98
CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS = 122


def device_attribute(attribute, ordinal):
    """``cuDeviceGetAttribute`` of the GPU with index ``ordinal``; None where the driver does not know it."""
    device, value = ctypes.c_int(), ctypes.c_int()
    _check(_fn("cuDeviceGet")(ctypes.byref(device), ctypes.c_int(ordinal)), "cuDeviceGet")
    if _fn("cuDeviceGetAttribute")(ctypes.byref(value), ctypes.c_int(attribute), device) != 0:
        return None
    return value.value


# ---------------------------------------------------------------- virtual memory (allocator_type="vmem")
# Physical chunks made with cuMemCreate, mapped into address ranges reserved once, exported to the node's other
# ranks as POSIX file descriptors. Never cuMulticastCreate: NVLink multicast stays off (docs/design.md, "Memory-model rules").
CU_MEM_ALLOCATION_TYPE_PINNED = 1
CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR = 1
CU_MEM_LOCATION_TYPE_DEVICE = 1
CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3
CU_MEM_ALLOC_GRANULARITY_MINIMUM = 0


class _MemLocation(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _AllocationProp(ctypes.Structure):  # CUmemAllocationProp
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", _MemLocation),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", _AllocFlags)]


class _AccessDesc(ctypes.Structure):  # CUmemAccessDesc
    _fields_ = [("location", _MemLocation), ("flags", ctypes.c_int)]


def _prop(device):
    return _AllocationProp(type=CU_MEM_ALLOCATION_TYPE_PINNED,
                           requestedHandleTypes=CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                           location=_MemLocation(CU_MEM_LOCATION_TYPE_DEVICE, device))


def vmm_granularity(device):
    size = ctypes.c_size_t()
    prop = _prop(device)
    _check(_fn("cuMemGetAllocationGranularity")(ctypes.byref(size), ctypes.byref(prop),
                                                ctypes.c_int(CU_MEM_ALLOC_GRANULARITY_MINIMUM)),
           "cuMemGetAllocationGranularity")
    return size.value


def vmm_reserve(size, alignment):
    """Reserve ``size`` bytes of device address space (nothing is backed yet); returns the start."""
    ptr = ctypes.c_uint64()
    _check(_fn("cuMemAddressReserve")(ctypes.byref(ptr), ctypes.c_size_t(size), ctypes.c_size_t(alignment),
                                      ctypes.c_uint64(0), ctypes.c_ulonglong(0)), "cuMemAddressReserve")
    return ptr.value


def vmm_create(size, device):
    """A physical allocation of ``size`` bytes on ``device`` that can be exported as a file descriptor."""
    handle = ctypes.c_uint64()
    prop = _prop(device)
    _check(_fn("cuMemCreate")(ctypes.byref(handle), ctypes.c_size_t(size), ctypes.byref(prop), ctypes.c_ulonglong(0)),
           "cuMemCreate")
    return handle.value


def vmm_export(handle):
    """A POSIX file descriptor for ``handle`` (the caller closes it)."""
    fd = ctypes.c_int()
    _check(_fn("cuMemExportToShareableHandle")(ctypes.byref(fd), ctypes.c_uint64(handle),
                                               ctypes.c_int(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                                               ctypes.c_ulonglong(0)), "cuMemExportToShareableHandle")
    return fd.value


def vmm_import(fd):
    handle = ctypes.c_uint64()
    _check(_fn("cuMemImportFromShareableHandle")(ctypes.byref(handle), ctypes.c_void_p(fd),
                                                 ctypes.c_int(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)),
           "cuMemImportFromShareableHandle")
    return handle.value


def vmm_map(address, size, handle, device):
    """Back [address, address + size) with ``handle`` and let ``device`` read and write it."""
    _check(_fn("cuMemMap")(ctypes.c_uint64(address), ctypes.c_size_t(size), ctypes.c_size_t(0),
                           ctypes.c_uint64(handle), ctypes.c_ulonglong(0)), "cuMemMap")
    access = _AccessDesc(location=_MemLocation(CU_MEM_LOCATION_TYPE_DEVICE, device),
                         flags=CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
    _check(_fn("cuMemSetAccess")(ctypes.c_uint64(address), ctypes.c_size_t(size), ctypes.byref(access),
                                 ctypes.c_size_t(1)), "cuMemSetAccess")


def vmm_unmap(address, size, handle):
    _check(_fn("cuMemUnmap")(ctypes.c_uint64(address), ctypes.c_size_t(size)), "cuMemUnmap")
    _check(_fn("cuMemRelease")(ctypes.c_uint64(handle)), "cuMemRelease")


# ---------------------------------------------------------------- CUDA graph captures (iris/platform/capture.py)
CU_USER_OBJECT_NO_DESTRUCTOR_SYNC = 1  # the only flag cuUserObjectCreate accepts
CU_GRAPH_USER_OBJECT_MOVE = 1  # the graph takes over our reference
SEM_BYTES = 64  # room for a sem_t (32 bytes in glibc on x86-64 and aarch64)

_libc = None


def _c():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None)
        _libc.malloc.restype = ctypes.c_void_p
        _libc.malloc.argtypes = [ctypes.c_size_t]
        for name in ("sem_init", "sem_getvalue", "sem_post"):
            getattr(_libc, name).restype = ctypes.c_int
    return _libc


def capture_info(stream):
    """(capture id, CUgraph handle) of the capture in progress on ``stream``."""
    status, capture_id, graph = ctypes.c_int(), ctypes.c_uint64(), ctypes.c_void_p()
    dependencies, count = ctypes.c_void_p(), ctypes.c_size_t()
    # cuStreamGetCaptureInfo_v2(stream, status, id, graph, dependencies, numDependencies)
    _check(_fn("cuStreamGetCaptureInfo")(ctypes.c_void_p(stream), ctypes.byref(status), ctypes.byref(capture_id),
                                         ctypes.byref(graph), ctypes.byref(dependencies), ctypes.byref(count)),
           "cuStreamGetCaptureInfo")
    return capture_id.value, graph.value


def when_graph_destroyed(graph):
    """A function that returns True once the graph ``graph`` (being captured) and every executable graph
    instantiated from it are destroyed. A user object that the graph retains posts a POSIX semaphore when the
    last of them goes: the driver calls ``sem_post`` itself, from a thread of its own and possibly late, even
    while the interpreter exits, so no Python runs there; the semaphore is never freed for the same reason."""
    libc = _c()
    sem = libc.malloc(SEM_BYTES)
    if not sem or libc.sem_init(ctypes.c_void_p(sem), 0, 0) != 0:
        raise RuntimeError("iris: sem_init failed")
    destroy = ctypes.cast(libc.sem_post, ctypes.c_void_p)  # CUhostFn; its int result is ignored
    handle = ctypes.c_void_p()
    _check(_fn("cuUserObjectCreate")(ctypes.byref(handle), ctypes.c_void_p(sem), destroy, ctypes.c_uint(1),
                                     ctypes.c_uint(CU_USER_OBJECT_NO_DESTRUCTOR_SYNC)), "cuUserObjectCreate")
    _check(_fn("cuGraphRetainUserObject")(ctypes.c_void_p(graph), handle, ctypes.c_uint(1),
                                          ctypes.c_uint(CU_GRAPH_USER_OBJECT_MOVE)), "cuGraphRetainUserObject")

    def destroyed():
        value = ctypes.c_int()
        libc.sem_getvalue(ctypes.c_void_p(sem), ctypes.byref(value))
        return value.value > 0

    return destroyed
