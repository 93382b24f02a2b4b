"""Remote atomics: every op x dtype it supports x sem x scope, old values, contention, refused dtypes."""

import pytest
import torch
import triton
import triton.language as tl

import iris
from conftest import world_sizes
from rank_utils import GPU_SCALE, SCOPES, SEMS, error_message, new_context, poison_value, rank_data

BLOCK = 64
N = 50  # not a multiple of BLOCK: the tail is masked


@triton.jit
def _atomic_kernel(target, vals, cmps, olds, n, heap_bases, rank, peer, OP: tl.constexpr, SEM: tl.constexpr,
                   SCOPE: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    v = tl.load(vals + offs, mask=mask)
    ptr = target + offs
    if OP == "add":
        old = iris.atomic_add(ptr, v, rank, peer, heap_bases, mask=mask, sem=SEM, scope=SCOPE)
    elif OP == "sub":
        old = iris.atomic_sub(ptr, v, rank, peer, heap_bases, mask=mask, sem=SEM, scope=SCOPE)
    elif OP == "xchg":
        old = iris.atomic_xchg(ptr, v, rank, peer, heap_bases, mask=mask, sem=SEM, scope=SCOPE)
    elif OP == "and":
        old = iris.atomic_and(ptr, v, rank, peer, heap_bases, mask=mask, sem=SEM, scope=SCOPE)
    elif OP == "or":
        old = iris.atomic_or(ptr, v, rank, peer, heap_bases, mask=mask, sem=SEM, scope=SCOPE)
    elif OP == "xor":
        old = iris.atomic_xor(ptr, v, rank, peer, heap_bases, mask=mask, sem=SEM, scope=SCOPE)
    elif OP == "min":
        old = iris.atomic_min(ptr, v, rank, peer, heap_bases, mask=mask, sem=SEM, scope=SCOPE)
    elif OP == "max":
        old = iris.atomic_max(ptr, v, rank, peer, heap_bases, mask=mask, sem=SEM, scope=SCOPE)
    else:  # cas has no mask: the whole block is in bounds (n == BLOCK)
        c = tl.load(cmps + offs)
        old = iris.atomic_cas(ptr, c, v, rank, peer, heap_bases, sem=SEM, scope=SCOPE)
    tl.store(olds + offs, old, mask=mask)


def _reference(op, init, vals, cmps):
    return {
        "add": lambda: init + vals, "sub": lambda: init - vals, "xchg": lambda: vals,
        "and": lambda: init & vals, "or": lambda: init | vals, "xor": lambda: init ^ vals,
        "min": lambda: torch.minimum(init, vals), "max": lambda: torch.maximum(init, vals),
        "cas": lambda: torch.where(init == cmps, vals, init),
    }[op]()


OPS_DTYPES = [
    ("add", [torch.int32, torch.int64, torch.float32, torch.float16, torch.bfloat16]),
    ("sub", [torch.int32, torch.int64, torch.float32]),
    ("xchg", [torch.int32, torch.int64, torch.float32]),
    ("and", [torch.int32, torch.int64]), ("or", [torch.int32, torch.int64]), ("xor", [torch.int32, torch.int64]),
    ("min", [torch.int32, torch.int64, torch.float32]), ("max", [torch.int32, torch.int64, torch.float32]),
    ("cas", [torch.int32, torch.int64, torch.float32, torch.int16, torch.float16, torch.bfloat16]),
]
CASES = [(op, dtype) for op, dtypes in OPS_DTYPES for dtype in dtypes]


def _atomic_body(op, dtype):
    """Rank r applies ``op`` to rank (r + 1)'s target, once per (sem, scope) pair, each on its own slice."""
    ctx = new_context()
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    dev = ctx.get_device()
    n = BLOCK if op == "cas" else N
    combos = [(sem, scope) for sem in SEMS for scope in SCOPES]
    target = ctx.empty(len(combos), BLOCK, dtype=dtype)
    olds = ctx.empty(len(combos), BLOCK, dtype=dtype)
    init = rank_data(rank, n, dtype, dev, salt=1)  # what sits on this rank before the peer's atomics
    vals = rank_data(rank, BLOCK, dtype, dev, salt=2)
    cmps = init.clone() if op == "cas" else vals.clone()
    if op == "cas":  # odd lanes compare against a wrong value, so half of them must fail
        cmps[1::2] += 1
    target.fill_(poison_value(dtype))
    target[:, :n] = init
    olds.fill_(poison_value(dtype))
    ctx.barrier()
    peer = (rank + 1) % world
    peer_init = rank_data(peer, n, dtype, dev, salt=1)
    peer_cmps = peer_init.clone() if op == "cas" else cmps
    if op == "cas":
        peer_cmps[1::2] += 1
    for i, (sem, scope) in enumerate(combos):
        _atomic_kernel[(1,)](target[i], vals, peer_cmps, olds[i], n, ctx.get_heap_bases(), rank, peer, OP=op, SEM=sem,
                             SCOPE=scope, BLOCK=BLOCK)
    ctx.barrier()
    source = (rank - 1) % world  # who operated on our target
    src_vals = rank_data(source, BLOCK, dtype, dev, salt=2)[:n]
    src_cmps = init.clone()
    if op == "cas":
        src_cmps[1::2] += 1
    expect = _reference(op, init, src_vals, src_cmps if op == "cas" else None)
    failures = []
    for i, combo in enumerate(combos):
        if not torch.equal(target[i, :n], expect):
            failures.append(f"{op} {dtype} {combo}: target wrong")
        if not torch.equal(olds[i, :n], peer_init):
            failures.append(f"{op} {dtype} {combo}: returned old values wrong")
        if not bool((target[i, n:] == poison_value(dtype)).all()):
            failures.append(f"{op} {dtype} {combo}: wrote past the mask")
    ctx.barrier()
    return failures


@pytest.mark.parametrize("world_size", world_sizes())
@pytest.mark.parametrize("op,dtype", CASES, ids=[f"{op}-{dt}" for op, dt in CASES])
def test_atomic_ops(pools, world_size, op, dtype):
    results = pools(world_size).run(_atomic_body, op, dtype)
    failures = [f"rank {r}: {f}" for r, fs in enumerate(results) for f in fs]
    assert not failures, "\n".join(failures)


@triton.jit
def _contention_kernel(counter, olds, heap_bases, rank, owner, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ones = tl.full((BLOCK,), 1, tl.int32)
    old = iris.atomic_add(counter + offs * 0, ones, rank, owner, heap_bases, sem="relaxed", scope="sys")
    tl.store(olds + offs, old)


def _contention_body(programs):
    """Every lane of every program of every rank adds 1 to one int32 on rank 0."""
    ctx = new_context()
    rank = ctx.get_rank()
    counter = ctx.zeros(1, dtype=torch.int32)
    olds = ctx.full((programs * BLOCK,), -1, dtype=torch.int32)
    ctx.barrier()
    _contention_kernel[(programs,)](counter, olds, ctx.get_heap_bases(), rank, 0, BLOCK=BLOCK)
    ctx.barrier()
    return int(counter.item()), olds.cpu()


@pytest.mark.parametrize("world_size", world_sizes())
def test_contention_counts_exact(pools, world_size):
    programs = 512 if GPU_SCALE else 4
    results = pools(world_size).run(_contention_body, programs)
    total = world_size * programs * BLOCK
    assert results[0][0] == total
    # Each old value 0 .. total-1 was returned to exactly one lane somewhere: no update was lost or doubled.
    olds = torch.cat([o for _, o in results]).sort().values
    assert torch.equal(olds, torch.arange(total, dtype=torch.int32))


@triton.jit
def _int8_atomic_kernel(target, heap_bases, rank):
    iris.atomic_add(target, 1, rank, rank, heap_bases)


def _refused_dtype_body():
    ctx = new_context()
    target = ctx.zeros(4, dtype=torch.int8)
    return error_message(lambda: _int8_atomic_kernel[(1,)](target, ctx.get_heap_bases(), ctx.get_rank()))


def test_unsupported_dtype_is_refused(pools):
    message = pools(2).run(_refused_dtype_body)[0]
    assert "atomic_add does not support int8" in message


@triton.jit
def _scalar_operand_kernel(flag, counter, olds, heap_bases, rank, peer):
    # Python-int operands beside an int64 pointer: the compiler sees int32 constants for 0 and rank + 1
    olds_cas = iris.atomic_cas(flag, 0, 7, rank, peer, heap_bases, sem="acq_rel", scope="sys")
    olds_add = iris.atomic_add(counter, 1 << 40, rank, peer, heap_bases, sem="relaxed", scope="sys")
    tl.store(olds, olds_cas)
    tl.store(olds + 1, olds_add)


def _scalar_operand_body():
    ctx = new_context()
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    flag = ctx.zeros(1, dtype=torch.int64)
    counter = ctx.full((1,), 5, dtype=torch.int64)
    olds = ctx.full((2,), -1, dtype=torch.int64)
    ctx.barrier()
    _scalar_operand_kernel[(1,)](flag, counter, olds, ctx.get_heap_bases(), rank, (rank + 1) % world)
    ctx.barrier()
    return flag.item(), counter.item(), olds.tolist()


def test_scalar_operands_take_the_pointer_type(pools):
    # Python ints beside int64 pointers: cast to int64 (on GPUs an int32 cmp fails the verifier: the compile
    # check of the CPU tier, test_compile.py, compiles this kernel for sm_90)
    for flag, counter, olds in pools(2).run(_scalar_operand_body):
        assert flag == 7 and counter == 5 + (1 << 40) and olds == [0, 5]


@triton.jit
def _bf16_kernel(x, target, heap_bases, rank, peer, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    value = tl.full([BLOCK], 1, dtype=tl.bfloat16) + tl.load(x + offs) * 2.0 - 0.5  # bf16 constants and arithmetic
    iris.atomic_add(target + offs, value, rank, peer, heap_bases, sem="relaxed", scope="sys")


def _bf16_body():
    ctx = new_context()
    rank, world = ctx.get_rank(), ctx.get_num_ranks()
    x = rank_data(rank, BLOCK, torch.bfloat16, ctx.get_device())
    target = ctx.full((BLOCK,), 3.0, dtype=torch.bfloat16)
    ctx.barrier()
    _bf16_kernel[(1,)](x, target, ctx.get_heap_bases(), rank, (rank + 1) % world, BLOCK=BLOCK)
    ctx.barrier()
    source = rank_data((rank - 1) % world, BLOCK, torch.bfloat16, ctx.get_device()).cpu()
    ref = torch.full((BLOCK,), 3.0, dtype=torch.bfloat16) + ((1 + source * 2.0) - 0.5)  # each step rounded to bf16
    return torch.equal(target.cpu(), ref), (target.cpu() - ref).abs().max().item()


def test_bf16_arithmetic_matches_torch(pools):
    # the interpreter has no bf16 constants and adds bf16 bits as integers unless iris mends it (backend.py)
    for same, worst in pools(2).run(_bf16_body):
        assert same, worst
