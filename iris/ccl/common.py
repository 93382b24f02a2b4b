"""Host-side plumbing shared by the collective launchers: argument checks, the launch plan, async handles."""

import zlib
from dataclasses import dataclass
from typing import Literal, get_args

import torch
import torch.distributed as dist
import triton

from iris.ccl import record
from iris.ccl.config import CollectiveConfig, Config
from iris.host.distributed import all_gather_object
from iris.host import launches
from iris.host.groups import MAX_COMM_PROGRAMS
from iris.host.memory.overlap import check_apart

# What a collective's ``op`` takes (``reduce_op``): a name of the reductions (the check takes any case) or a member of
# torch.distributed.ReduceOp (``ReduceOp.SUM``, ...); and its ``config``: ours, or upstream's, which
# ``resolve_config`` translates.
ReduceOpName = Literal["sum", "avg", "max", "min"]
REDUCE_OPS = get_args(ReduceOpName)
ReduceOp = ReduceOpName | dist.ReduceOp.RedOpType
AnyConfig = CollectiveConfig | Config
DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.float32)
_TORCH_OPS = {"SUM": "sum", "AVG": "avg", "MAX": "max", "MIN": "min"}
DEFAULT_CONFIG = CollectiveConfig()
# From this many elements a collective is bandwidth-bound and takes the large shape (``plan``). Its program
# count is a constant rather than the SM count, so ranks on different GPU models still launch the same grid.
LARGE_NUMEL = 1 << 24
LARGE_PROGRAMS = 128


def reduce_op(op, dtype, caller):
    """``op`` as one of REDUCE_OPS; accepts torch.distributed.ReduceOp members too."""
    name = op if isinstance(op, str) else _TORCH_OPS.get(str(op).split(".")[-1].upper(), str(op))
    name = name.lower()
    if name not in REDUCE_OPS:
        raise ValueError(f"{caller}: unknown op {op!r}; use one of {REDUCE_OPS}")
    if name == "avg" and not dtype.is_floating_point:
        raise ValueError(f"{caller}: op='avg' needs a floating-point dtype, got {dtype}; use 'sum' and divide")
    return name


def flat(tensor, caller, name):
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{caller}: {name} must be a torch.Tensor, got {type(tensor).__name__}")
    if tensor.dtype not in DTYPES:
        raise ValueError(f"{caller}: {name} has dtype {tensor.dtype}, which the collectives do not support; use one "
                         f"of {', '.join(str(d) for d in DTYPES)}")
    if not tensor.is_contiguous():
        raise ValueError(f"{caller}: {name} must be contiguous (the collectives read and write it as one run of "
                         "elements); call .contiguous() first")
    return tensor.view(-1)


def same_dtype(out, inp, caller):
    if out.dtype != inp.dtype:
        raise ValueError(f"{caller}: out has dtype {out.dtype} but inp has {inp.dtype}; they must match")


def in_place(caller, out, inp, first=0, n=None):
    """``out`` apart from ``inp`` (False), or exactly ``inp``'s elements from ``first`` on, the call's in-place form
    (True; with ``n``, this rank's slice of ``n`` elements); any other overlap raises (``check_apart``)."""
    form = "inp itself" if n is None else f"this rank's slice inp[{first}:{first + n}] of inp itself"
    return check_apart(caller, out, "out", inp, "inp", f"use a separate out, or {form} for an in-place call",
                       inside=first)


def expect_numel(tensor, numel, caller, name, how):
    if tensor.numel() != numel:
        raise ValueError(f"{caller}: {name} has {tensor.numel()} elements ({tuple(tensor.shape)}), expected {how} "
                         f"= {numel}")


def split_rows(tensor, parts, caller, name):
    """Elements per part when ``tensor`` is split into ``parts`` equal slices along dim 0."""
    rows = tensor.shape[0] if tensor.dim() else 1
    if rows % parts:
        raise ValueError(f"{caller}: {name} has {rows} rows along dim 0, which the group of {parts} ranks does not "
                         f"divide; pad dim 0 to a multiple of {parts}")
    return tensor.numel() // parts


@dataclass
class Plan:
    sync: object       # GroupSync
    config: CollectiveConfig
    block: int
    warps: int
    programs: int
    caller: str
    large: bool  # bandwidth-bound: at least LARGE_NUMEL elements, on GPUs

    @property
    def grid(self):
        return (self.programs,)

    @property
    def launch(self):
        """What of the plan every member must launch alike (``fingerprint``)."""
        return dict(programs=self.programs, block=self.block)


def resolve_config(config, caller):
    """The ``CollectiveConfig`` of a call: the default, the one given, or the translation of upstream's
    ``iris.ccl.Config``."""
    config = DEFAULT_CONFIG if config is None else config
    if isinstance(config, Config):
        config = config.collective(caller)
    if not isinstance(config, CollectiveConfig):
        raise TypeError(f"{caller}: config must be an iris.ccl.CollectiveConfig or iris.ccl.Config, got "
                        f"{type(config).__name__}")
    if config.use_gluon and not record.has_gluon(caller):
        gluon = ", ".join(r.name for r in record.records() if r.gluon)
        raise ValueError(f"{caller}: use_gluon=True, but only {gluon} have a Gluon kernel; use use_gluon=False (the "
                         "Triton kernel, same results)")
    if config.gluon_path == "tma" and caller != "ccl.all_gather":
        raise ValueError(f"{caller}: gluon_path='tma', but only all_gather has a TMA path; use "
                         "gluon_path='registers' (the Gluon register stores, same results)")
    return config


def precheck(caller, group, config, tensors, *extra):
    """Check mode, first thing in every collective: all ranks compare the call (shapes, dtypes, root, op)
    before any rank validates locally, so a mismatch fails on every rank instead of leaving some ranks
    inside a kernel waiting for ranks that raised."""
    if resolve_config(config, caller).check or launches.CHECK_ALL:
        signature = tuple((tuple(t.shape), str(t.dtype)) for t in tensors) + extra
        check_across_ranks(caller, signature, group)


def plan(ctx, caller, numel, group, config, sync=None, large_shape=None):
    """Resolve the group (or take ``sync``, a pair for send/recv) and the config, and pick the block, warps
    and program count: functions of the size and config only, so identical on every rank. ``large_shape``
    (programs, block, warps) replaces the bandwidth-bound default for a kernel measured faster with another."""
    config = resolve_config(config, caller)
    if sync is None:
        sync = ctx.group_sync(group, caller)
    on_cpu = ctx.get_device().type == "cpu"
    large = not on_cpu and numel >= LARGE_NUMEL
    # Latency-bound: 4096 elements per step (8 KiB of bf16: 16 bytes per thread at 8 warps, two steps in
    # flight) on 64 programs. Bandwidth-bound: about one program per SM, 16384 elements at 32 warps (the push
    # shape of the microbenchmarks): on 2 x H200 all_gather reaches 351 GB/s at 256 MiB with it, 313 with 64 x 4096.
    # Small blocks on the cpu backend, where each program runs in Python.
    large_programs, large_block, large_warps = large_shape or (LARGE_PROGRAMS, 16384, 32)
    block = config.block_size or (256 if on_cpu else large_block if large else 4096)
    block = min(block, max(16, triton.next_power_of_2(max(numel, 1))))
    warps = config.num_warps or (large_warps if large else 8)
    cap = config.comm_sms or (4 if on_cpu else large_programs if large else 64)
    programs = max(1, min(cap, triton.cdiv(max(numel, 1), block), MAX_COMM_PROGRAMS))
    return Plan(sync, config, block, warps, programs, caller, large)


def algorithm(plan, choices, caller):
    """The config's algorithm, which must be one of this collective's ``choices``."""
    if plan.config.algorithm not in choices:
        raise ValueError(f"{caller}: algorithm={plan.config.algorithm!r} is not one of {choices}")
    return plan.config.algorithm


def check_across_ranks(caller, signature, group):
    """Check mode: every rank must make the same call (shapes, dtypes, root); say which rank differs."""
    everyone = all_gather_object((caller, signature), group=group)
    mine = everyone[0]
    for rank, theirs in enumerate(everyone):
        if theirs != mine:
            raise ValueError(f"{caller}: ranks disagree on the call: group rank 0 passed {mine[1]} but group rank "
                             f"{rank} passed {theirs[1]} ({theirs[0]}); every rank must pass the same shapes and dtype")


def fingerprint(ctx, caller, tensors, *extra, launch=None, sync=None):
    """The call's fingerprint, which its kernel's barriers carry to the members (``iris/device/sync.py``): a hash
    of what every member must pass alike: the caller, each tensor's dtype and shape (None stands for an absent
    one), ``extra`` (op, root, ...), ``launch`` (a dict of what shapes the kernel's grid and protocol: programs,
    block, algorithm) and the group (``sync``, a ``GroupSync``); the kernel mixes in its operands' offsets
    (``call_match``). 27 bits above four bits 0101: Triton specialises an integer argument on being 1 or a multiple
    of 16, so every fingerprint compiles alike. Also describes the call, for the error that names it
    (``ctx.groups.last_text``). On a cached launch's general path only, or per call where a launcher caches nothing
    (a few microseconds)."""
    described = ", ".join("None" if t is None else f"{str(t.dtype).replace('torch.', '')}{list(t.shape)}"
                          for t in tensors)
    text = f"{caller}({described}{''.join(f', {value!r}' for value in extra)})"
    if launch:
        text += " with " + ", ".join(f"{name}={value!r}" for name, value in launch.items())
    if sync is not None and sync.size != ctx.num_ranks:
        text += f" in the group {sync.ranks}"
    ctx.groups.last_text = text
    return (zlib.crc32(f"{text} {None if sync is None else sync.ranks}".encode()) & 0x7FFFFFF) << 4 | 5


def vector_hint(*tensors):
    """16 when every tensor starts on a 16-byte boundary (then translated accesses can be 16-byte vectors),
    else None: a hint the data does not honour would make the compiler read the wrong bytes."""
    return 16 if all(t.data_ptr() % 16 == 0 for t in tensors) else None


def accumulate_in_fp32(dtype):
    return dtype in (torch.float16, torch.bfloat16)


class Work:
    """What ``async_op=True`` returns. The kernel is already queued on the current stream; ``wait()`` makes
    the then-current stream wait for it (nothing to do on the cpu backend, where kernels run synchronously).

    Example::

        x = ctx.ones(1024)
        work = ctx.ccl.all_reduce(x, x, async_op=True)  # queued; the host goes on
        work.wait()
        assert torch.all(x == world_size)
    """

    def __init__(self, device: torch.device) -> None:
        self._event = None
        if device.type == "cuda":
            self._event = torch.cuda.Event()
            self._event.record()

    def wait(self) -> bool:
        """Make the current stream wait for the collective (the host does not wait); returns True.

        Example::

            x = ctx.ones(1024)
            work = ctx.ccl.all_reduce(x, x, async_op=True)  # in place
            work.wait()  # work queued from here on sees the sum
            assert torch.all(x == world_size)
        """
        if self._event is not None:
            torch.cuda.current_stream().wait_event(self._event)
        return True

    def is_completed(self) -> bool:
        """Whether the collective has finished on the device; never blocks (always True on the cpu backend).

        Example::

            inp, out = ctx.full((4,), float(rank)), ctx.zeros(world_size * 4)
            work = ctx.ccl.all_gather(out, inp, async_op=True)
            while not work.is_completed():
                pass  # the host is free to do other work
            assert torch.equal(out, torch.arange(world_size).repeat_interleave(4).float())
        """
        return self._event is None or self._event.query()


def done(ctx, async_op):
    """The collective's result: a ``Work`` with ``async_op``. Raises ``PeerError`` if a peer failed during the call:
    its waits were released by the failed peer's poison (and the data read from it is garbage)."""
    ctx.groups.check(ctx.groups.last_call, entering=False)
    return Work(ctx.get_device()) if async_op else None
