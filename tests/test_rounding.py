"""Conversions give the GPU's bits on the cpu backend too: every float <-> float, float <-> integer and integer <->
integer ``.to`` of a kernel, over values that hit every rounding case (ties both ways, one step either side of a tie,
subnormals, overflow, inf, NaN, random bit patterns), compared bit for bit with an exact reference of what the GPU's
``cvt`` instructions give (``iris/interpreter/conversions.py``), which is torch's own conversion wherever torch rounds
once; ``tl.dot`` on 16-bit inputs; and a 16-bit all_reduce, which is torch's fp32 sum in rank order, rounded once."""

import math

import pytest
import torch

import iris  # noqa: F401  (before triton: on the cpu backend it switches Triton to its interpreter)
import triton
import triton.language as tl

from conftest import on_gpu
from iris.ccl import CollectiveConfig
from rank_utils import SEED, new_context

DEV = "cuda" if on_gpu() else "cpu"
FLOATS = [torch.float64, torch.float32, torch.float16, torch.bfloat16]
INTS = [torch.int8, torch.uint8, torch.int16, torch.int32, torch.uint32, torch.int64, torch.uint64]
# (bits of precision with the leading one, smallest normal exponent, largest exponent)
FORMATS = {torch.float64: (53, -1022, 1023), torch.float32: (24, -126, 127), torch.float16: (11, -14, 15),
           torch.bfloat16: (8, -126, 127)}
# where torch's CPU conversion rounds once, as the GPU does; it rounds float64 -> 16-bit floats and integers ->
# bfloat16 through float32 (twice), where the GPU's cvt.rn.bf16.f64 / cvt.rn.bf16.s64 round once
TORCH_ROUNDS_ONCE = [(torch.float32, torch.bfloat16), (torch.float32, torch.float16), (torch.float64, torch.float32),
                     (torch.float16, torch.bfloat16), (torch.bfloat16, torch.float16)] + \
                    [(i, f) for i in INTS for f in (torch.float64, torch.float32, torch.float16)]
BLOCK = 1024


@triton.jit
def _convert_kernel(src, dst, n, RTZ: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(src + offs, mask=mask)
    if RTZ:
        y = tl.cast(x, dst.dtype.element_ty, fp_downcast_rounding="rtz")
    else:
        y = x.to(dst.dtype.element_ty)
    tl.store(dst + offs, y, mask=mask)


def convert(src, dtype, rtz=False):
    """``tri``: ``src`` converted by the kernel, into an output poisoned with a value no conversion gives here."""
    out = torch.full(src.shape, 77, dtype=torch.uint8).repeat_interleave(dtype.itemsize).view(dtype).to(DEV)
    _convert_kernel[(triton.cdiv(src.numel(), BLOCK),)](src.to(DEV), out, src.numel(), RTZ=rtz, BLOCK=BLOCK)
    return out.cpu()


# ---- the reference: what the GPU's cvt gives, exactly, on Python numbers


def round_exact(value, dtype, toward_zero=False):
    """``value`` (a Python float or int) rounded once into float ``dtype``: to nearest even, or toward zero."""
    if isinstance(value, float) and not math.isfinite(value):
        return float(value)
    if value == 0:
        return math.copysign(0.0, value)
    p, emin, emax = FORMATS[dtype]
    num, den = abs(value).as_integer_ratio()
    den_log2 = den.bit_length() - 1
    e = max(num.bit_length() - 1 - den_log2, emin)  # the exponent of the value's leading bit, or of the subnormals
    largest = math.ldexp((1 << p) - 1, emax - p + 1)
    if e > emax:
        out = largest if toward_zero else math.inf
    else:
        shift = e - p + 1 + den_log2  # the value is num / 2**den_log2; the last kept bit is worth 2**(e - p + 1)
        if shift <= 0:
            q, rest, half = num << -shift, 0, 1
        else:
            q, rest, half = num >> shift, num & ((1 << shift) - 1), 1 << (shift - 1)
        if not toward_zero and (rest > half or (rest == half and q & 1)):
            q += 1
        out = math.ldexp(q, e - p + 1)
        if out > largest:
            out = largest if toward_zero else math.inf
    return math.copysign(out, value)


def int_bits(dtype):
    return dtype.itemsize * 8


def wrap(value, dtype):
    bits = int_bits(dtype)
    value %= 1 << bits
    return value - (1 << bits) if dtype.is_signed and value >= 1 << (bits - 1) else value


def float_to_int_exact(value, dtype):
    """``cvt.rzi``: toward zero, NaN as 0, clamped to the cvt's range (16 bits for an 8-bit result), then wrapped."""
    width = max(16, int_bits(dtype))
    low, high = (-(1 << (width - 1)), (1 << (width - 1)) - 1) if dtype.is_signed else (0, (1 << width) - 1)
    if math.isnan(value):
        return 0
    if math.isinf(value):
        return wrap(high if value > 0 else low, dtype)
    return wrap(min(max(math.trunc(value), low), high), dtype)


def reference(src, dtype, rtz=False):
    """``ref``: ``src`` converted as the GPU converts it."""
    values = src.tolist()
    if dtype.is_floating_point:
        return torch.tensor([round_exact(v, dtype, rtz) for v in values], dtype=torch.float64).to(dtype)
    if src.dtype.is_floating_point:
        ints = [float_to_int_exact(v, dtype) for v in values]
    else:
        ints = [wrap(v, dtype) for v in values]
    return torch.tensor([wrap(v, torch.int64) for v in ints], dtype=torch.int64).to(dtype) if dtype == torch.uint64 \
        else torch.tensor(ints, dtype=dtype)


def bits(t):
    return t.view({1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def differences(tri, ref):
    """Indices where the bits differ; two NaNs count as equal (the payload bits are no promise)."""
    same = bits(tri) == bits(ref)
    if tri.dtype.is_floating_point:
        same |= tri.isnan() & ref.isnan()
    return (~same).nonzero().flatten()


# ---- the values


def random_bits(dtype, n, seed):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n * dtype.itemsize,), dtype=torch.uint8, generator=gen).view(dtype)


def float_ties(src, target, n, seed):
    """Values of float ``src`` halfway between two neighbours of float ``target`` (all exponents, subnormals, the
    largest finite and what would follow it), with their neighbours one step below and above, both signs."""
    p, emin, emax = FORMATS[target]
    t = random_bits(target, n, seed).double().abs()
    t = t[t.isfinite()].tolist() + [math.ldexp((1 << p) - 1, emax - p + 1), math.ldexp(1, emin - p + 1)]
    mids = []
    for x in t:
        e = max(math.frexp(x)[1] - 1, emin) if x else emin
        mids.append(x + math.ldexp(0.5, e - p + 1))
    mids = torch.tensor(mids, dtype=torch.float64)
    held = mids.to(src)
    held = held[held.double() == mids]  # ties the source type can hold
    step = bits(held)
    around = torch.cat([step, step - 1, step + 1]).view(src)
    return torch.cat([around, -around])


def int_ties(src, target, n, seed):
    """Integers of ``src`` halfway between two neighbours of float ``target``, and one either side, both signs."""
    p = FORMATS[target][0]
    gen = torch.Generator().manual_seed(seed)
    bits_ = int_bits(src)
    out = []
    for shift in range(1, bits_ - p + 1):
        for m in torch.randint(1 << (p - 1), 1 << p, (n,), generator=gen).tolist():
            tie = (m << shift) + (1 << (shift - 1))
            out += [tie - 1, tie, tie + 1]
    low, high = (-(1 << (bits_ - 1)), (1 << (bits_ - 1)) - 1) if src.is_signed else (0, (1 << bits_) - 1)
    out = [v for x in out for v in (x, -x) if low <= v <= high] + [low, high, 0, 1, low + 1, high - 1]
    return torch.tensor([wrap(v, torch.int64) for v in out], dtype=torch.int64).to(src) if src == torch.uint64 \
        else torch.tensor(out, dtype=src)


def source_values(src):
    """Every rounding case of ``src`` converted to each type: random bit patterns, ties of each narrower type,
    integer bounds and halves, and the special values."""
    parts = [random_bits(src, 1500, SEED)]
    if src.is_floating_point:
        parts += [float_ties(src, t, 300, SEED + i) for i, t in enumerate(FLOATS[1:]) if t != src]
        edges = [0.0, -0.0, math.inf, -math.inf, math.nan, 0.5, 1.5, 2.5, -2.5, 0.75, -0.99]
        for k in (7, 8, 15, 16, 31, 32, 63, 64):
            edges += [s * (2.0 ** k + d) for s in (1, -1) for d in (-1.5, -1, -0.5, 0, 0.5, 1)]
        for t in FLOATS:
            info = torch.finfo(t)
            edges += [info.max, -info.max, info.tiny, -info.tiny, info.smallest_normal * info.eps]
        parts.append(torch.tensor(edges, dtype=torch.float64).to(src))
    else:
        parts += [int_ties(src, t, 8, SEED + i) for i, t in enumerate(FLOATS[1:]) if FORMATS[t][0] < int_bits(src)]
    return torch.cat(parts)


def check(src_dtype, targets, rtz=False):
    src = source_values(src_dtype)
    fails = []
    for dtype in targets:
        tri, ref = convert(src, dtype, rtz), reference(src, dtype, rtz)
        bad = differences(tri, ref)
        if len(bad):
            i = bad[0].item()
            fails.append(f"{src_dtype} -> {dtype}{' rtz' if rtz else ''}: {len(bad)} of {len(src)} differ, first "
                         f"{src[i].item()!r}: tri {tri[i].item()!r}, ref {ref[i].item()!r}")
    assert not fails, "\n".join(fails)


@pytest.mark.parametrize("src", FLOATS + INTS, ids=str)
def test_conversions_give_the_gpus_bits(src):
    check(src, [t for t in FLOATS + INTS if t != src])


def test_round_toward_zero():
    """``tl.cast(x, fp16/bf16, fp_downcast_rounding="rtz")``: ``cvt.rz`` from float32, overflow to the largest
    finite value, inf and NaN kept."""
    check(torch.float32, [torch.float16, torch.bfloat16], rtz=True)


@pytest.mark.skipif(on_gpu(), reason="the GPU's compiler refuses it before a kernel runs")
def test_round_toward_zero_from_float64_is_refused_as_on_gpus():
    x = torch.ones(4, dtype=torch.float64)
    with pytest.raises(Exception, match=r"fp_downcast_rounding='rtz'\) from fp64: Triton compiles rounding toward zero "
                                        r"from float32 only"):
        convert(x, torch.float32, rtz=True)


@pytest.mark.parametrize("src,dtype", TORCH_ROUNDS_ONCE, ids=str)
def test_reference_is_torchs_rounding(src, dtype):
    """The reference is torch's conversion wherever torch rounds once (float -> int: inside the range only, where
    torch truncates as the GPU does)."""
    values = source_values(src)
    ref, torch_ref = reference(values, dtype), values.to(dtype)
    bad = differences(torch_ref, ref)
    assert not len(bad), f"{len(bad)} differ, first {values[bad[0]].item()!r}"


@pytest.mark.parametrize("src", FLOATS, ids=str)
def test_reference_truncates_as_torch_inside_the_range(src):
    values = source_values(src)
    for dtype in INTS:
        info = torch.iinfo(dtype)
        low, high = float(info.min - 1), float(info.max + 1)  # exclusive: truncation lands inside
        inside = values[values.isfinite() & (values.double() > low) & (values.double() < high)]
        assert len(inside) > 100
        assert torch.equal(reference(inside, dtype), inside.to(dtype)), dtype


# ---- tl.dot on 16-bit inputs, fp32 accumulation


@triton.jit
def _dot_kernel(a, b, c, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)
    x = tl.load(a + rm[:, None] * K + rk[None, :])  # [M, K]
    y = tl.load(b + rk[:, None] * N + rn[None, :])  # [K, N]
    acc = tl.dot(x, y, acc=tl.zeros([M, N], dtype=tl.float32))  # [M, N] fp32
    tl.store(c + rm[:, None] * N + rn[None, :], acc)
    tl.store(c + M * N + rm[:, None] * N + rn[None, :], acc.to(a.dtype.element_ty).to(tl.float32))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_dot_of_16_bit_inputs(dtype):
    """Exact on values whose products and sums fp32 holds (any order of the sum gives the same bits), and within
    fp32 rounding of torch's fp32 matmul on random values; the result rounded to ``dtype`` is torch's rounding."""
    M, N, K = 16, 32, 64
    gen = torch.Generator().manual_seed(SEED)
    exact = [torch.randint(-64, 65, shape, generator=gen).to(dtype) / 16 for shape in ((M, K), (K, N))]
    normal = [torch.randn(shape, generator=gen).to(dtype) for shape in ((M, K), (K, N))]
    for (a, b), exactly in ((exact, True), (normal, False)):
        out = torch.full((2, M, N), math.nan, device=DEV)
        _dot_kernel[(1,)](a.to(DEV), b.to(DEV), out, M=M, N=N, K=K)
        tri, ref = out.cpu(), a.float() @ b.float()
        if exactly:
            assert torch.equal(tri[0], ref) and ref.abs().max() > 1
        else:
            torch.testing.assert_close(tri[0], ref, rtol=1e-5, atol=1e-5)
        assert torch.equal(tri[1], tri[0].to(dtype).float())


# ---- end to end: a 16-bit all_reduce is torch's fp32 sum in rank order, rounded once


def _all_reduce_body(dtype):
    ctx = new_context()
    rank, world, dev = ctx.get_rank(), ctx.get_num_ranks(), ctx.get_device()
    shape = (33, 65)  # 2145 elements
    inputs = [torch.randn(shape, generator=torch.Generator().manual_seed(SEED + r)).to(dtype) for r in range(world)]
    total = inputs[0].float()
    for x in inputs[1:]:
        total = total + x.float()
    refs = {"sum": total.to(dtype), "avg": (total / world).to(dtype)}
    inp, out = ctx.empty(shape, dtype=dtype), ctx.empty(shape, dtype=dtype)
    inp.copy_(inputs[rank].to(dev))
    fails = []
    for algorithm in ("one_shot", "two_shot"):
        for op, ref in refs.items():
            out.fill_(math.nan)
            ctx.barrier()
            ctx.ccl.all_reduce(out, inp, op=op, config=CollectiveConfig(algorithm=algorithm))
            ctx.barrier()
            bad = differences(out.cpu(), ref)
            if len(bad):
                fails.append(f"rank {rank} {algorithm} {op}: {len(bad)} of {ref.numel()} differ")
    assert (total.to(dtype) != total).any()  # some sums are rounded: the check could fail
    return fails


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_all_reduce_is_torchs_fp32_sum_rounded_once(pools, dtype):
    fails = [f for by_rank in pools(2).run(_all_reduce_body, dtype) for f in by_rank]
    assert not fails, "\n".join(fails)
