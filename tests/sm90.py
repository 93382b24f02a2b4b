"""Compile library kernels for sm_90 without a GPU, as Triton's launcher specialises real arguments: tensors lend
their dtype and a 16-byte aligned address, an int equal to 1 becomes a constant and a multiple of 16 is marked
divisible, inside tuple arguments too (a group's sync tuple, a GEMM's strides). Used by the compile probes."""

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler.compiler import make_backend
from triton.runtime.jit import create_function_from_signature

TARGET = GPUTarget("cuda", 90, 32)
BACKEND = make_backend(TARGET)


def launch_compile(fn, *args, **kwargs):
    """``fn`` compiled for ``args`` and constexpr ``kwargs`` (``num_warps`` and ``num_stages`` are options)."""
    src, options = launch_source(fn, *args, **kwargs)
    return triton.compile(src, target=TARGET, options=options)


def launch_source(fn, *args, **kwargs):
    """(what ``triton.compile`` takes, the options) for the launch ``fn[grid](*args, **kwargs)``; the source's
    ``hash()`` is the key of the compiled binary in Triton's cache."""
    options = {k: kwargs.pop(k) for k in ("num_warps", "num_stages") if k in kwargs}
    bound, specialization, launch_options = create_function_from_signature(fn.signature, fn.params, BACKEND)(
        *args, **kwargs)
    _, signature, constexprs, attrs = fn._pack_args(BACKEND, options, bound, specialization, launch_options)
    return source(fn, signature, constexprs, attrs), options


def source(fn, signature, constexprs, attrs):
    """What ``triton.compile`` takes for ``fn``: Gluon kernels have a source of their own (layouts, no passes that
    pick them)."""
    if fn.is_gluon():
        from triton.experimental.gluon._runtime import GluonASTSource

        return GluonASTSource(fn, signature, constexprs, attrs)
    return triton.compiler.ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=attrs)


def ptr(dtype=torch.bfloat16):
    """A pointer argument: a small tensor, whose address torch aligns to 64 bytes."""
    return torch.empty(16, dtype=dtype)


# A group's sync tuple as ``GroupSync.args`` makes it: rank 5 at index 3 of a world of 6 (values that are neither 1
# nor multiples of 16, so that none is specialised away).
SYNC = (ptr(torch.int64), ptr(torch.int64), ptr(torch.int32), 5, 3, 6, 21,  # GroupSync.args (fingerprint 21: 0b10101)
        (ptr(torch.int64), ptr(torch.int64)), 0x7F0000001000)  # the operands' tables, the alarm's address
