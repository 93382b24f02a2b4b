"""Host-side checks shared by the fused ops (their workspaces are ``ctx.workspaces``,
``iris/host/memory/workspaces.py``)."""

import torch

from iris.host import launches
from iris.host.memory.overlap import check_apart
from iris.ops.config import FusedConfig, OpsConfig

DTYPES = (torch.float16, torch.bfloat16, torch.float32)
DEFAULT_CONFIG = OpsConfig()


def resolve_config(config, caller):
    config = DEFAULT_CONFIG if config is None else config
    if isinstance(config, FusedConfig):  # upstream Iris's config: its tile carries over
        config = config.to_ops_config()
    if not isinstance(config, OpsConfig):
        raise TypeError(f"{caller}: config must be an iris.ops.OpsConfig (or upstream's iris.ops.FusedConfig), "
                        f"got {type(config).__name__}")
    return config


def launch_key(ctx, caller, group, config, tensors):
    """The key a fused op's launch on the SMs is remembered under (``iris/host/launches.py``): the collectives' key
    of ``tensors`` (shapes, dtypes, aliasing, alignment, group, config) with their strides (the kernels take them
    as arguments). None, so never remembered, for upstream's config (a plain dataclass a caller may change between
    calls) and while tracing (the launch would hold the trace's buffers)."""
    if (config is not None and type(config) is not OpsConfig) or ctx.tracing.enabled:
        return None
    key = launches.key_of(caller, group, config, tensors)
    return None if key is None else key + tuple(t.stride() for t in tensors)


def remember(ctx, key, group, config, launch, sync, workspaces, symmetric=()):
    """Store ``launch`` of the fused op's general path under ``key`` (``launch_key``) for the calls to come and
    return it. It holds views of the op's ``workspaces`` (their names): a hit needs them unchanged (not grown,
    dropped, or handed out zeroed at another shape since, which a call of another shape does: such a call is a
    miss)."""
    ranks = tuple(sync.ranks)
    stamp = ctx.workspaces.stamp(workspaces, ranks)
    return ctx.launches.put(key, group, config, launch, symmetric=symmetric,
                            guard=lambda: ctx.workspaces.stamp(workspaces, ranks) == stamp)


def span_bytes(tensor):
    """Bytes from ``tensor``'s first element to the end of its last (a strided 2-D view's rows and the gaps between)."""
    return (sum((size - 1) * stride for size, stride in zip(tensor.shape, tensor.stride())) + 1) * tensor.element_size()


def check_operands(caller, out, a, b):
    for name, t in (("out", out), ("A", a), ("B", b)):
        if not isinstance(t, torch.Tensor) or t.dim() != 2:
            raise ValueError(f"{caller}: {name} must be a 2-D tensor, got "
                             f"{tuple(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__}")
        if t.dtype not in DTYPES:
            raise ValueError(f"{caller}: {name} has dtype {t.dtype}; use float16, bfloat16 or float32")
    if not a.dtype == b.dtype == out.dtype:
        raise ValueError(f"{caller}: A, B and out must share a dtype, got {a.dtype}, {b.dtype}, {out.dtype}")
    if not a.device == b.device == out.device:  # a kernel given a host pointer faults and poisons the CUDA context
        raise ValueError(f"{caller}: A is on {a.device}, B on {b.device} and out on {out.device}; move A and B to "
                         f"{out.device}")
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"{caller}: A is {tuple(a.shape)} and B is {tuple(b.shape)}: inner dimensions differ")
    for name, t in (("A", a), ("B", b)):  # tiles of out are written while other tiles still read A and B
        check_apart(caller, out, "out", t, name, "the op reads A and B while it writes out; use a separate out")


def bias_apart(caller, out, bias):
    """The op writes ``out`` before it adds ``bias``: refuse a ``bias`` that shares bytes with ``out``, before any
    launch (a remembered one included)."""
    if isinstance(bias, torch.Tensor) and isinstance(out, torch.Tensor):
        check_apart(caller, bias, "bias", out, "out", "out is written before bias is added; pass a separate bias")


def expect_shape(caller, name, tensor, shape, how):
    if tuple(tensor.shape) != tuple(shape):
        raise ValueError(f"{caller}: {name} is {tuple(tensor.shape)}, expected {tuple(shape)} ({how})")


def divisible(caller, what, value, world_size):
    if value % world_size:
        raise ValueError(f"{caller}: {what} = {value} is not divisible by the world size {world_size}; pad it to a "
                         f"multiple of {world_size}")
    return value // world_size


# What "auto" weighs on GPUs, measured on H200 (docs/perf-notes.md): SM-issued NVLink bytes per second, bf16
# GEMM FLOP/s, and the share of GEMM time the traffic must reach before fusing it pays. Our GEMM runs at 96-102%
# of cuBLAS, so hiding less than that gap cannot win; every fused op measured faster than its bulk pair on the
# large shapes, down to traffic of 5% of the GEMM's time (docs/results.md).
LINK_BYTES_PER_S = 370e9
GEMM_FLOPS_PER_S = 700e12
FUSE_ABOVE = 0.04


def choose_fused(caller, config, ctx, tiles, needs=(), comm_bytes=0, flops=1):
    """Whether to run the fused kernel. ``needs`` lists what the shape or operands lack for it: "fused" then
    raises, "auto" falls back to bulk. On GPUs "auto" also goes bulk when the output has fewer tiles than the
    GPU has SMs (small M: the fused kernel would leave SMs idle, while cuBLAS splits K), or when the traffic
    (``comm_bytes`` sent per rank) is too short next to the GEMM (``flops`` per rank) to be worth hiding."""
    if config.variant == "bulk":
        return False
    if needs:
        if config.variant == "fused":
            raise ValueError(f"{caller}: the fused variant needs {' and '.join(needs)}; pick another block size "
                             "or variant='auto'")
        return False
    if config.variant == "fused":
        return True
    device = ctx.get_device()
    if device.type != "cuda":
        return True
    if tiles < ctx.get_agreed_cu_count():  # the same answer on every rank
        return False
    return comm_bytes / LINK_BYTES_PER_S >= FUSE_ABOVE * flops / GEMM_FLOPS_PER_S


# Programs all_gather_matmul's workgroup-specialised kernel gives to pushing A rows, then to the GEMM: 16 of 132 SMs,
# the count its push was measured with on 2 x H200 (docs/perf-notes.md, all_gather_matmul; no other count was timed).
COMM_SMS = 16


def comm_programs(programs):
    """Programs a workgroup-specialised kernel gives to communication: ``COMM_SMS``, leaving at least three
    quarters of the grid to the GEMM (the interpreter's grid is tiny)."""
    return max(1, min(COMM_SMS, programs // 4))


def bulk_gemm(out, a, b, config):
    """The GEMM of a bulk variant: cuBLAS on GPUs (the best unfused pair is what fusion must beat), the shared
    Triton mainloop elsewhere."""
    if out.numel() == 0:
        return out
    if a.device.type == "cuda":
        return torch.matmul(a, b, out=out)
    from iris.ops.gemm import matmul

    return matmul(out, a, b, config)


def add_bias(ctx, out, bias, caller):
    """``out += bias`` (a row vector [N], broadcast over rows); no-op for None. First the check every call ends
    with (``iris.ccl.common.done``): a mismatch the op's kernels found raises here on the cpu backend, where they
    have run, before the add touches ``out``."""
    ctx.groups.check(caller, entering=False)
    if bias is not None:
        if bias.dim() != 1 or bias.shape[0] != out.shape[1]:
            raise ValueError(f"{caller}: bias is {tuple(bias.shape)}, expected ({out.shape[1]},) (one per column)")
        out.add_(bias)
    return out


def row_vector_width(tensor, column_offset_step=0):
    """16 when every row of ``tensor`` starts on a 16-byte boundary and its columns are contiguous, so a kernel
    can pass ``hint=(1, 16)`` and remote accesses along a row become 16-byte vectors; else 1 (a hint that
    claims nothing). A column offset that is a multiple of ``column_offset_step`` elements must keep the
    alignment too."""
    size = tensor.element_size()
    aligned = (tensor.data_ptr() % 16 == 0 and tensor.stride(1) == 1 and (tensor.stride(0) * size) % 16 == 0
               and (column_offset_step * size) % 16 == 0)
    return 16 if aligned else 1
