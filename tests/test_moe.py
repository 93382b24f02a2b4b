"""MoE dispatch and combine against their torch references: uneven and zero token counts, random expert
assignments, -1 entries, int16/32/64 ids, weighted and unweighted combine, FP8 rows with scales, bit-identity
across ranks and repeated calls, CUDA-graph replay with new routing, and bad input."""

import pytest
import torch

from iris.ccl import MoEDispatchConfig
from iris.ccl.moe import reference as ref_moe
from iris.ccl.moe.routing import make_expt_assignment, owners
from conftest import on_gpu
from rank_utils import GPU_SCALE, SEED, error_message, new_context, warmed_graph

H = 7168 if GPU_SCALE else 20  # not a multiple of the block on the cpu backend
ID_DTYPES = [torch.int16, torch.int32, torch.int64]


def routing(world, tokens, E, k, call, dtype=torch.bfloat16):
    """Every shard's (tokens, topk_idx, topk_weight) for one call; token 0 is the same on every shard."""
    out = []
    for s in range(world):
        gen = torch.Generator().manual_seed(SEED + 1000 * call + s)
        x = torch.randn((tokens[s], H), generator=gen).to(dtype)
        idx = torch.randint(-1, E, (tokens[s], k), generator=gen)  # -1: no expert; repeats allowed
        w = torch.rand((tokens[s], k), generator=gen)
        if tokens[s]:
            shared = torch.Generator().manual_seed(SEED + 1000 * call + 999)
            x[0] = torch.randn((H,), generator=shared).to(dtype)
            idx[0] = torch.randint(-1, E, (k,), generator=shared)
            w[0] = torch.rand((k,), generator=shared)
        out.append((x, idx.to(ID_DTYPES[(call + s) % 3]), w))
    return out


def expert_fn(rows, experts):
    """A different elementwise function per expert, rounded to the rows' dtype."""
    e = experts.to(torch.float32)[:, None]
    return (rows.to(torch.float32) * (1 + 0.25 * e) - e).to(rows.dtype)


def run_experts(buf, meta, local_experts):
    """Each received row through its expert; rows past those in use are left as they are."""
    offs = meta.slice_offs.tolist()
    out = buf.clone()
    for l, e in enumerate(local_experts):
        rows = buf[offs[l]:offs[l + 1]]
        out[offs[l]:offs[l + 1]] = expert_fn(rows.cpu(), torch.full((rows.shape[0],), e)).to(buf.device)
    return out


def _moe_body(tokens, E, k, expert_dict, calls):
    ctx = new_context(1 << 28 if GPU_SCALE else 1 << 22)
    rank, world, dev = ctx.get_rank(), ctx.get_num_ranks(), ctx.get_device()
    assignment = None if expert_dict is None else make_expt_assignment(world, E, expert_dict, dev)
    d = ctx.ccl.moe_dispatcher(H, E, k, max(tokens), expt_assignment=assignment)
    owner = owners(d.expt_assignment)
    local = [e for e in range(E) if owner[e] == rank]
    fails, firsts = [], []
    for call in range(calls):
        inputs = routing(world, tokens, E, k, call)
        x, idx, w = inputs[rank]
        d._buf.fill_(float("nan"))  # rows dispatch does not write show as NaN
        d._combine.fill_(float("nan"))
        ctx.barrier()
        buf, meta, handle = d.dispatch(x.to(dev), idx.to(dev), w.to(dev))
        ref_rows, ref_sizes = ref_moe.dispatch([i[0] for i in inputs], [i[1] for i in inputs], owner, rank)
        n = int(meta.slice_offs[-1])
        if not torch.equal(meta.slice_sizes.cpu(), ref_sizes):
            fails.append(f"call {call}: slice_sizes {meta.slice_sizes.tolist()} != {ref_sizes.tolist()}")
        elif not torch.equal(buf[:n].cpu().view(torch.int16), ref_rows.view(torch.int16)):
            fails.append(f"call {call}: received rows differ from the reference")
        expert_out = run_experts(buf, meta, local)
        idx64 = idx.to(torch.int64)
        slot_rows = expert_fn(x.repeat_interleave(k, 0), idx64.clamp(min=0).reshape(-1)).view(-1, k, H)
        results = []
        for weighted in (False, True):
            out = d.combine(expert_out, handle, weighted=weighted)
            ref = ref_moe.combine(slot_rows, idx, w, E, weighted, torch.bfloat16)
            if not torch.equal(out.cpu().view(torch.int16), ref.view(torch.int16)):
                bad = (out.cpu().float() - ref.float()).abs().max().item()
                fails.append(f"call {call} weighted={weighted}: combine differs from the reference (max {bad})")
            results.append(out.cpu())
        if call == 0 and calls > 1:  # the same call twice: the same bits (once per module: it costs a call)
            again, _, again_handle = d.dispatch(x.to(dev), idx.to(dev), w.to(dev))
            repeat = d.combine(run_experts(again, meta, local), again_handle, weighted=True)
            if not torch.equal(repeat.cpu().view(torch.int16), results[1].view(torch.int16)):
                fails.append(f"call {call}: a repeated dispatch + combine gave different bits")
        firsts.append(results[1][0].view(torch.int16) if tokens[rank] else None)
        ctx.barrier()  # nobody poisons the buffers before every rank has checked
    return fails, firsts


CASES = {  # world -> (tokens per shard, experts, topk, expert dict or None for uniform, calls)
    3: ([5, 0, 3], 6, 2, None, 2),  # a repeat of the first call, and a second reusing the buffers with new routing
    4: ([4, 0, 6, 1], 7, 3, {0: [6, 1], 1: [], 2: [0, 3, 5], 3: [2, 4]}, 1),  # uneven, one shard owning none
}


def _assert_no_fails(results):
    """Every rank's body returns the list of what it found wrong: all must be empty."""
    fails = [f"rank {r}: {f}" for r, fs in enumerate(results) for f in fs]
    assert not fails, "\n".join(fails[:10])


@pytest.mark.parametrize("world_size", [3, 4])
def test_dispatch_combine_match_reference(pools, world_size):
    tokens, E, k, experts, calls = CASES[world_size]
    if GPU_SCALE:
        tokens = [t * 97 for t in tokens]
    results = pools(world_size).run(_moe_body, tokens, E, k, experts, calls)
    fails = [f"rank {r}: {f}" for r, (fs, _) in enumerate(results) for f in fs]
    assert not fails, "\n".join(fails[:10])
    for call in range(calls):  # token 0 is the same everywhere: every shard that has it computes the same bits
        firsts = [firsts[call] for _, firsts in results if firsts[call] is not None]
        assert all(torch.equal(f, firsts[0]) for f in firsts), f"call {call}: shards disagree on a shared token"


def _remembered_body():
    """One dispatcher, calls of changing token counts, id dtypes and routing: each call's rows and combine are the
    reference's bit for bit, and a dispatch (combine) whose token count and id dtype (token count) were seen
    before takes its remembered launches, one never seen takes the general path."""
    ctx = new_context(1 << 28 if GPU_SCALE else 1 << 22)
    rank, world, dev = ctx.get_rank(), ctx.get_num_ranks(), ctx.get_device()
    E, k = 2 * world, 2
    d = ctx.ccl.moe_dispatcher(H, E, k, 6)
    owner = owners(d.expt_assignment)
    local = [e for e in range(E) if owner[e] == rank]
    # (tokens of shard 0, id dtype): shard s has max(0, tokens - s) tokens; repeats are remembered
    plan = [(4, torch.int32), (4, torch.int32), (6, torch.int32), (4, torch.int16), (4, torch.int32), (1, torch.int32),
            (6, torch.int32)]
    seen, fails = set(), []
    for call, (t0, id_dtype) in enumerate(plan):
        tokens = [max(0, t0 - s) for s in range(world)]
        inputs = [(x, idx.to(id_dtype), w) for x, idx, w in routing(world, tokens, E, k, 50 + call)]
        x, idx, w = inputs[rank]
        d._buf.fill_(float("nan"))
        d._combine.fill_(float("nan"))
        ctx.barrier()
        hits = d._launches.hits
        buf, meta, handle = d.dispatch(x.to(dev), idx.to(dev), w.to(dev))
        ref_rows, ref_sizes = ref_moe.dispatch([i[0] for i in inputs], [i[1] for i in inputs], owner, rank)
        n = int(meta.slice_offs[-1])
        if not torch.equal(meta.slice_sizes.cpu(), ref_sizes) or \
                not torch.equal(buf[:n].cpu().view(torch.int16), ref_rows.view(torch.int16)):
            fails.append(f"call {call} (T {tokens[rank]}, {id_dtype}): received rows differ from the reference")
        out = d.combine(run_experts(buf, meta, local), handle, weighted=True)
        slot_rows = expert_fn(x.repeat_interleave(k, 0), idx.to(torch.int64).clamp(min=0).reshape(-1)).view(-1, k, H)
        ref = ref_moe.combine(slot_rows, idx, w, E, True, torch.bfloat16)
        if not torch.equal(out.cpu().view(torch.int16), ref.view(torch.int16)):
            fails.append(f"call {call} (T {tokens[rank]}, {id_dtype}): combine differs from the reference")
        expect = ((tokens[rank], id_dtype) in seen) + any(t == tokens[rank] for t, _ in seen)  # combine: no ids
        if d._launches.hits - hits != expect:
            fails.append(f"call {call} (T {tokens[rank]}, {id_dtype}): {d._launches.hits - hits} remembered "
                         f"launches, expected {expect}")
        seen.add((tokens[rank], id_dtype))
        ctx.barrier()
    return fails


def test_remembered_launches_follow_shape_and_routing(pools):
    _assert_no_fails(pools(3).run(_remembered_body))


def _many_blocks_body():
    """More (token, slot) entries than one route block and more experts than one tile of each kernel loop (ranks
    and counts over several blocks, block prefixes, expert chunks, the offsets' carry over 1024 experts), experts
    dealt round-robin over the shards: rows and sizes exact, the weighted combine bit for bit."""
    ctx = new_context(1 << 28 if GPU_SCALE else 1 << 23)
    rank, world, dev = ctx.get_rank(), ctx.get_num_ranks(), ctx.get_device()
    E, k, tokens = 1101, 2, [150, 0, 131]  # 300 entries: 3 route blocks; E: 2 prefix chunks, 9 route chunks
    expert_dict = {s: [e for e in range(E) if e % world == s] for s in range(world)}
    d = ctx.ccl.moe_dispatcher(H, E, k, max(tokens), expt_assignment=make_expt_assignment(world, E, expert_dict, dev))
    owner = owners(d.expt_assignment)
    inputs = []
    for s in range(world):  # most slots on a few experts, so that an expert spans every block; some -1, some spread
        gen = torch.Generator().manual_seed(SEED + 77 + s)
        hot = torch.tensor([0, 5, 366, 367, 1024, 1100])
        idx = hot[torch.randint(0, hot.numel(), (tokens[s], k), generator=gen)]
        spread = torch.rand((tokens[s], k), generator=gen) < 0.3
        idx = torch.where(spread, torch.randint(-1, E, (tokens[s], k), generator=gen), idx)
        x = torch.randn((tokens[s], H), generator=gen).to(torch.bfloat16)
        inputs.append((x, idx.to(torch.int32), torch.rand((tokens[s], k), generator=gen)))
    x, idx, w = inputs[rank]
    d._buf.fill_(float("nan"))
    d._combine.fill_(float("nan"))
    ctx.barrier()
    buf, meta, handle = d.dispatch(x.to(dev), idx.to(dev), w.to(dev))
    ref_rows, ref_sizes = ref_moe.dispatch([i[0] for i in inputs], [i[1] for i in inputs], owner, rank)
    n, fails = int(meta.slice_offs[-1]), []
    if not torch.equal(meta.slice_sizes.cpu(), ref_sizes):
        fails.append("slice_sizes differ from the reference")
    elif not torch.equal(buf[:n].cpu().view(torch.int16), ref_rows.view(torch.int16)):
        fails.append("received rows differ from the reference")
    local = [e for e in range(E) if owner[e] == rank]
    out = d.combine(run_experts(buf, meta, local), handle, weighted=True)
    slot_rows = expert_fn(x.repeat_interleave(k, 0), idx.to(torch.int64).clamp(min=0).reshape(-1)).view(-1, k, H)
    if not torch.equal(out.cpu().view(torch.int16), ref_moe.combine(slot_rows, idx, w, E, True,
                                                                    torch.bfloat16).view(torch.int16)):
        fails.append("combine differs from the reference")
    return fails


def test_many_blocks_and_experts(pools):
    _assert_no_fails(pools(3).run(_many_blocks_body))


def _subgroup_body():
    """A dispatcher over ranks 1..3 of 4 (its buffers are the members' workspaces): rows and combine exact."""
    import torch.distributed as dist

    ctx = new_context(1 << 28 if GPU_SCALE else 1 << 22)
    rank, dev = ctx.get_rank(), ctx.get_device()
    group = dist.new_group([1, 2, 3])
    if rank == 0:
        return []
    me, E, k, tokens = rank - 1, 3, 2, [2, 0, 3]
    d = ctx.ccl.moe_dispatcher(H, E, k, 3, group=group)
    inputs = routing(3, tokens, E, k, 7)
    x, idx, w = inputs[me]
    buf, meta, handle = d.dispatch(x.to(dev), idx.to(dev), w.to(dev))
    owner = owners(d.expt_assignment)
    ref_rows, _ = ref_moe.dispatch([i[0] for i in inputs], [i[1] for i in inputs], owner, me)
    n = int(meta.slice_offs[-1])
    fails = [] if torch.equal(buf[:n].cpu().view(torch.int16), ref_rows.view(torch.int16)) else ["subgroup rows differ"]
    out = d.combine(buf, handle).cpu()
    ref = ref_moe.combine(x.repeat_interleave(k, 0).view(-1, k, H), idx, w, E, False, torch.bfloat16)
    if not torch.equal(out.view(torch.int16), ref.view(torch.int16)):
        fails.append("subgroup combine differs")
    return fails


def test_subgroup_dispatcher(pools):
    _assert_no_fails(pools(4).run(_subgroup_body))


def _fp8_body():
    ctx = new_context(1 << 28 if GPU_SCALE else 1 << 22)
    rank, world, dev = ctx.get_rank(), ctx.get_num_ranks(), ctx.get_device()
    E, k, T = 2 * world, 2, 3 + rank
    d = ctx.ccl.moe_dispatcher(H, E, k, 3 + world, dtype=torch.float8_e4m3fn)
    shards = []
    for s in range(world):
        gen = torch.Generator().manual_seed(SEED + s)
        bits = torch.randint(0, 256, (3 + s, H), generator=gen, dtype=torch.int16).to(torch.uint8)
        scales = torch.randn((3 + s, d.n_scales), generator=gen)
        idx = torch.randint(-1, E, (3 + s, k), generator=gen)
        shards.append((bits.view(torch.float8_e4m3fn), scales, idx))
    x, scales, idx = shards[rank]
    (rows, row_scales), meta, handle = d.dispatch(x.to(dev), idx.to(dev), torch.ones(T, k, device=dev),
                                                  scales=scales.to(dev))
    owner = owners(d.expt_assignment)
    ref_rows, _ = ref_moe.dispatch([s[0].view(torch.uint8) for s in shards], [s[2] for s in shards], owner, rank)
    ref_scales, _ = ref_moe.dispatch([s[1].view(torch.int32) for s in shards], [s[2] for s in shards], owner, rank)
    n = int(meta.slice_offs[-1])
    fails = []
    if not torch.equal(rows[:n].cpu().view(torch.uint8), ref_rows):
        fails.append("fp8 rows differ")
    if not torch.equal(row_scales[:n].cpu().view(torch.int32), ref_scales):
        fails.append("fp8 scales differ")
    expert_out = torch.ones((d.capacity, H), dtype=torch.bfloat16, device=dev)
    out = d.combine(expert_out, handle)
    expect = ((idx >= 0).sum(1, keepdim=True) * torch.ones(T, H)).to(torch.bfloat16)
    if not torch.equal(out.cpu(), expect):
        fails.append("combine after fp8 dispatch counts the wrong slots")
    return fails


def test_fp8_rows_and_scales_travel_bit_exact(pools):
    _assert_no_fails(pools(3).run(_fp8_body))


def _graph_body(replays):
    """dispatch + experts + combine captured once with validate=False, replayed with new routing each time."""
    ctx = new_context(1 << 30)
    rank, world, dev = ctx.get_rank(), ctx.get_num_ranks(), ctx.get_device()
    E, k, T = 8 * world, 4, 128
    d = ctx.ccl.moe_dispatcher(H, E, k, T, config=MoEDispatchConfig(validate=False))
    owner_dev = owners(d.expt_assignment).to(dev)
    x = torch.zeros((T, H), dtype=torch.bfloat16, device=dev)
    idx = torch.zeros((T, k), dtype=torch.int32, device=dev)
    w = torch.zeros((T, k), device=dev)
    local = (owner_dev == rank).nonzero().flatten()
    out = {}

    def step():
        buf, meta, handle = d.dispatch(x, idx, w)
        rows = torch.arange(d.capacity, device=dev)
        l = (torch.searchsorted(meta.slice_offs, rows, right=True) - 1).clamp(0, local.numel() - 1)
        out["y"] = d.combine(expert_fn(buf, local[l]), handle, weighted=True)

    stream = torch.cuda.Stream()
    replay = warmed_graph(ctx, step, stream)
    fails = []
    for i in range(replays):
        per_rank = [max(1, T - 17 * r - 5 * i) for r in range(world)]  # uneven counts, new each replay
        inputs = routing(world, [T] * world, E, k, i + 1)
        xi, ii, wi = inputs[rank]
        ii = ii.to(torch.int64)
        ii[per_rank[rank]:] = -1  # fewer tokens routed this replay
        x.copy_(xi.to(dev))
        idx.copy_(ii.to(dev))
        w.copy_(wi.to(dev))
        ctx.barrier()
        replay()
        torch.cuda.synchronize()
        slot_rows = expert_fn(xi.repeat_interleave(k, 0), ii.clamp(min=0).reshape(-1)).view(-1, k, H)
        ref = ref_moe.combine(slot_rows, ii, wi, E, True, torch.bfloat16)
        err = ((out["y"].cpu().float() - ref.float()).abs().max() / ref.float().abs().max()).item()
        if err > 1e-2:  # compiled, a product may contract into an FMA: one bf16 rounding apart at most (2**-8)
            fails.append(f"replay {i}: max error {err:.2e} relative to the largest output")
        ctx.barrier()
    return fails


@pytest.mark.skipif(not on_gpu(), reason="CUDA graphs need a GPU (GPU tier)")
@pytest.mark.parametrize("world_size", [1, 2])
def test_dispatch_combine_replay_in_cuda_graph_with_new_routing(pools, world_size):
    _assert_no_fails(pools(world_size).run(_graph_body, 20))


def _bad_input_body():
    ctx = new_context()
    dev = ctx.get_device()
    E, k, T = 6, 2, 4
    d = ctx.ccl.moe_dispatcher(H, E, k, T)
    x = torch.ones((T, H), dtype=torch.bfloat16, device=dev)
    # every shard receives rows, so a check of expert_out's rows fails on every shard alike
    idx = (torch.arange(T * k, dtype=torch.int32, device=dev) % E).view(T, k)
    w = torch.ones((T, k), device=dev)
    _, _, handle = d.dispatch(x, idx, w)
    good = torch.ones((d.capacity, H), dtype=torch.bfloat16, device=dev)
    cases = {
        "moe_dispatch: tokens has 5 rows, more than max_tokens=4": lambda: d.dispatch(
            torch.ones((T + 1, H), dtype=torch.bfloat16, device=dev), torch.zeros((T + 1, k), dtype=torch.int32,
                                                                                device=dev), torch.ones(T + 1, k)),
        # found by the route kernel: raised by the call on the cpu backend, by check() (or the next call) on GPUs
        f"moe_dispatch: topk_idx holds expert id {E}, outside [-1, {E})": lambda: (d.dispatch(x, idx * 0 + E, w),
                                                                                    d.check()),
        "moe_dispatch: topk_idx holds expert id -2": lambda: (d.dispatch(x, idx * 0 - 2, w), d.check()),
        # int64 ids past int32's range are not truncated into a valid expert
        f"moe_dispatch: topk_idx holds expert id {(1 << 32) + 1}": lambda: (
            d.dispatch(x, idx.long() * 0 + (1 << 32) + 1, w), d.check()),
        f"moe_dispatch: tokens has hidden size {H + 1}": lambda: d.dispatch(
            torch.ones((T, H + 1), dtype=torch.bfloat16, device=dev), idx, w),
        "moe_dispatch: tokens has dtype torch.float32": lambda: d.dispatch(x.float(), idx, w),
        "moe_dispatch: topk_idx has dtype torch.float32": lambda: d.dispatch(x, idx.float(), w),
        # (a dispatch of bad ids runs, routing them nowhere: each combine case dispatches afresh)
        "moe_combine: expert_out has 1 rows, fewer than the": lambda: d.combine(good[:1], d.dispatch(x, idx, w)[2]),
        "moe_combine: expert_out has dtype torch.float32": lambda: d.combine(good.float(), d.dispatch(x, idx, w)[2]),
    }
    fails = []
    for expect, call in cases.items():
        message = error_message(call)
        if not message.startswith("ValueError: " + expect):
            fails.append(f"expected {expect!r}, got {message.splitlines()[0]!r}")
    # a bad id reaches no expert: the rows delivered and the combine are those of the same call with -1 in its place
    # (a dispatcher that does not report them, so that the calls return their results)
    quiet = ctx.ccl.moe_dispatcher(H, E, k, T, config=MoEDispatchConfig(validate=False))
    dropped, bad, wide = idx.clone(), idx.clone(), idx.long()
    # wide: expert 1 once truncated to 32 bits, where token 0 (of other values) goes too
    dropped[1, 0], bad[1, 0], wide[1, 0] = -1, E + 5, (1 << 32) + 1
    results = {}
    for name, ids in (("dropped", dropped), ("bad", bad), ("wide", wide)):
        buf, meta, routed = quiet.dispatch(x * (1 + torch.arange(T, device=dev)[:, None]), ids, w)
        rows = buf[:int(meta.slice_offs[-1])].clone()
        results[name] = (rows, quiet.combine(buf, routed))
    for name in ("bad", "wide"):
        for what, ours, theirs in zip(("rows delivered", "combine"), results[name], results["dropped"]):
            if not torch.equal(ours, theirs):
                fails.append(f"a {name} id changed the {what}: {tuple(ours.shape)} vs {tuple(theirs.shape)}")
    d.dispatch(x, idx, w)
    message = error_message(d.combine, good, handle)
    if "handle is of dispatch call" not in message:
        fails.append(f"a stale handle was accepted: {message.splitlines()[0]!r}")
    return fails


def test_bad_input(pools):
    _assert_no_fails(pools(3).run(_bad_input_body))


def _layer_body():
    from iris.models import ExpertParallelMoE, MoEConfig
    from iris.models.moe import reference

    ctx = new_context(1 << 28 if GPU_SCALE else 1 << 22)
    rank, dev = ctx.get_rank(), ctx.get_device()
    config = MoEConfig(hidden=256, intermediate=128, experts=12, topk=4) if GPU_SCALE else \
        MoEConfig(hidden=16, intermediate=8, experts=6, topk=2)
    layer = ExpertParallelMoE(ctx, config, max_tokens=8, seed=3)
    x = torch.randn((2 + 3 * rank, config.hidden), generator=torch.Generator().manual_seed(SEED + rank))
    x = x.to(torch.bfloat16).to(dev)
    tri, ref = layer(x).cpu().float(), reference(x, config, seed=3).cpu().float()
    err = ((tri - ref).norm() / ref.norm()).item()
    return [] if err < 1e-2 else [f"MoE layer: relative error {err:.2e} against the one-device reference"]


def test_moe_layer_matches_one_device_reference(pools):
    _assert_no_fails(pools(3).run(_layer_body))
