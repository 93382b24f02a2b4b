"""The collectives across nodes: iris kernels inside each node, the rail's torch.distributed between them.

With ``N`` nodes of ``L`` ranks, rank ``r = m * L + l`` is local rank ``l`` of node ``m``; its rail is the
ranks ``[l, L + l, ...]`` (``iris/ccl/multinode/rail.py``). Each algorithm runs the intra-node collectives' public
launchers on the node group, so it follows their layouts, and hands the rail only this rank's 1/L share of
what its node must send: the lower bound, since the node's L ranks each hand the same amount.

    all_reduce      node reduce_scatter -> rail all_reduce of the shard -> node all_gather
    all_gather      rail all_gather (by node) -> node all_gather -> [L, N, n] read as [N, L, n]
    reduce_scatter  [N, L, n] read as [L, N, n] -> node reduce_scatter (local rank l keeps the chunks of the
                    ranks m * L + l) -> rail reduce_scatter
    all_to_all      [N, L, n] read as [L, N, n] -> node all_to_all (to the destination's local rank) ->
                    [L, N, n] read as [N, L, n] -> rail all_to_all (to the destination's node)
    broadcast       node broadcast on the root's node -> rail broadcast of slice l from the root's node ->
                    node all_gather of the slices
    barrier         node device barrier -> rail barrier -> node device barrier

Every element of an all_reduce is reduced by one rail: the node stage sums local ranks 0..L-1 in that order and
the rail's engine gives its members the same bits (NCCL's and gloo's all_reduce do), so every rank gets the
same bits. ``avg`` sums, then divides by the world size. 16-bit types accumulate in fp32 inside the node and
round there once; the rail then sums the rounded shards in the input dtype, as NCCL would across nodes.
reduce, gather and scatter are an all_reduce, all_gather or broadcast whose result only the root keeps: correct,
with the root's full size on the rail. send and recv reach ranks of this node only.

Scratch buffers are whole-world workspaces (``ctx.workspaces``), made at a call's first size: graph-capturable
after a first call, when the rail is NCCL. The intra-node stages run with the default ``CollectiveConfig``.
"""

import torch
import triton

from iris.ccl import common
from iris.ccl.all_gather import all_gather as node_all_gather
from iris.ccl.all_to_all import all_to_all as node_all_to_all
from iris.ccl.reduce_scatter import reduce_scatter as node_reduce_scatter
from iris.ccl.rooted import broadcast as node_broadcast, recv as node_recv, send as node_send


def _scratch(ctx, name, numel, dtype):
    return ctx.workspaces.get(f"ccl.hierarchical.{name}", range(ctx.num_ranks), (numel,), dtype)


def _shape(ctx):
    return ctx.num_nodes, ctx.local_world_size


def _node_reduce_scatter(ctx, out, inp, op):
    if ctx.local_world_size == 1:
        out.copy_(inp)
    else:
        node_reduce_scatter(ctx, out, inp, op=op, group=ctx.node_group)


def _node_all_gather(ctx, out, inp):
    if ctx.local_world_size == 1:
        out.copy_(inp)
    else:
        node_all_gather(ctx, out, inp, group=ctx.node_group)


def _reduce_checks(ctx, caller, out, inp, op):
    inp_flat, out_flat = common.flat(inp, caller, "inp"), common.flat(out, caller, "out")
    common.same_dtype(out, inp, caller)
    return inp_flat, out_flat, common.reduce_op(op, inp.dtype, caller)


def all_reduce(ctx, out, inp, op="sum", group=None, async_op=False, config=None):
    """``ccl.all_reduce`` across nodes (module docstring); ``inp`` and ``out`` may be anywhere."""
    caller = "ccl.all_reduce"
    inp_flat, out_flat, op = _reduce_checks(ctx, caller, out, inp, op)
    common.expect_numel(out, inp.numel(), caller, "out", "inp.numel()")
    _all_reduce(ctx, out_flat, inp_flat, op)
    return common.done(ctx, async_op)


def _all_reduce(ctx, out, inp, op):
    nodes, local = _shape(ctx)
    n = inp.numel()
    shard_len = triton.cdiv(n, local)
    padded = _scratch(ctx, "all_reduce.in", shard_len * local, inp.dtype)
    padded[:n].copy_(inp)
    padded[n:].zero_()  # the tail's reduction is dropped; zeros keep it finite
    shard = _scratch(ctx, "all_reduce.shard", shard_len, inp.dtype)
    _node_reduce_scatter(ctx, shard, padded, "sum" if op == "avg" else op)
    ctx.rail.all_reduce(shard, "sum" if op == "avg" else op)
    gathered = _scratch(ctx, "all_reduce.out", shard_len * local, inp.dtype)
    _node_all_gather(ctx, gathered, shard)
    out.copy_(gathered[:n])
    if op == "avg":
        out.div_(ctx.num_ranks)


def all_gather(ctx, out, inp, group=None, async_op=False, config=None):
    """``ccl.all_gather`` across nodes (module docstring): ``out`` = every rank's ``inp`` in rank order."""
    caller = "ccl.all_gather"
    inp_flat, out_flat = common.flat(inp, caller, "inp"), common.flat(out, caller, "out")
    common.same_dtype(out, inp, caller)
    nodes, local = _shape(ctx)
    n = inp.numel()
    common.expect_numel(out, ctx.num_ranks * n, caller, "out", f"world size {ctx.num_ranks} * inp.numel() {n}")
    by_node = _scratch(ctx, "all_gather.rail", nodes * n, inp.dtype)
    ctx.rail.all_gather(by_node, inp_flat)  # in place too: out is written last
    gathered = _scratch(ctx, "all_gather.node", local * nodes * n, inp.dtype)
    _node_all_gather(ctx, gathered, by_node)  # [L, N, n]
    out_flat.view(nodes, local, n).copy_(gathered.view(local, nodes, n).transpose(0, 1))
    return common.done(ctx, async_op)


def reduce_scatter(ctx, out, inp, op="sum", group=None, async_op=False, config=None):
    """``ccl.reduce_scatter`` across nodes (module docstring): ``out`` = slice ``rank`` of the reduction (torch's
    layout). Upstream's full-size ``out``, which keeps each rank's tiles and leaves the others, runs within one
    node only."""
    caller = "ccl.reduce_scatter"
    if out.numel() == inp.numel() and ctx.num_ranks > 1:
        raise ValueError(f"{caller}: a full-size out ({out.numel()} elements, upstream's block-of-tiles layout) runs "
                         f"within one node only, and this world spans {ctx.num_nodes} nodes; pass out of "
                         f"inp.numel() / {ctx.num_ranks} elements (torch's layout, also ccl.reduce_scatter_tensor)")
    inp_flat, out_flat, op = _reduce_checks(ctx, caller, out, inp, op)
    nodes, local = _shape(ctx)
    n = common.split_rows(inp, ctx.num_ranks, caller, "inp")
    common.expect_numel(out, n, caller, "out", f"inp.numel() / world size {ctx.num_ranks}")
    by_local = _scratch(ctx, "reduce_scatter.in", local * nodes * n, inp.dtype)
    by_local.view(local, nodes, n).copy_(inp_flat.view(nodes, local, n).transpose(0, 1))
    mine = _scratch(ctx, "reduce_scatter.node", nodes * n, inp.dtype)  # chunks m * L + l, reduced over the node
    _node_reduce_scatter(ctx, mine, by_local, "sum" if op == "avg" else op)
    ctx.rail.reduce_scatter(out_flat, mine, "sum" if op == "avg" else op)
    if op == "avg":
        out_flat.div_(ctx.num_ranks)
    return common.done(ctx, async_op)


def reduce_scatter_v(ctx, out, inp, splits, op="sum", group=None, async_op=False, config=None):
    """``ccl.reduce_scatter_v`` across nodes: the hierarchical all_reduce of the whole input into a scratch buffer,
    then this rank's range of it (every rank moves the whole reduction: correct, not bandwidth-optimal)."""
    caller = "ccl.reduce_scatter_v"
    splits = tuple(splits)
    if len(splits) != ctx.num_ranks:
        raise ValueError(f"{caller}: splits has {len(splits)} entries but the world has {ctx.num_ranks} ranks")
    common.expect_numel(inp, sum(splits), caller, "inp", "sum(splits)")
    common.expect_numel(out, splits[ctx.cur_rank], caller, "out", f"splits[{ctx.cur_rank}]")
    total = _scratch(ctx, "reduce_scatter_v", inp.numel(), inp.dtype)
    _all_reduce(ctx, total, common.flat(inp, caller, "inp"), common.reduce_op(op, inp.dtype, caller))
    start = sum(splits[:ctx.cur_rank])
    common.flat(out, caller, "out").copy_(total[start:start + splits[ctx.cur_rank]])
    return common.done(ctx, async_op)


def all_to_all(ctx, out, inp, group=None, async_op=False, config=None):
    """``ccl.all_to_all`` across nodes, upstream's layout: a tensor of 2 or more dims is split along dim 1
    (``iris/ccl/all_to_all.py``), so its column blocks are moved to slices of dim 0, exchanged as
    ``all_to_all_single``, and moved back; a 1-D tensor is ``all_to_all_single`` itself."""
    if inp.dim() < 2:
        return all_to_all_single(ctx, out, inp, async_op=async_op)
    caller = "ccl.all_to_all"
    common.same_dtype(out, inp, caller)
    if out.shape != inp.shape or inp.shape[1] % ctx.num_ranks:
        raise ValueError(f"{caller}: out {tuple(out.shape)} and inp {tuple(inp.shape)} must be one (M, N * "
                         f"{ctx.num_ranks}) shape, dim 1 split into {ctx.num_ranks} column blocks")
    rows = inp.shape[0]
    by_block = inp.reshape(rows, ctx.num_ranks, -1).transpose(0, 1).contiguous()  # [W, M, n]: slice q for rank q
    arrived = torch.empty_like(by_block)
    all_to_all_single(ctx, arrived, by_block)
    out.view(rows, ctx.num_ranks, -1).copy_(arrived.transpose(0, 1))
    return common.done(ctx, async_op)


def all_to_all_single(ctx, out, inp, group=None, async_op=False, config=None):
    """``ccl.all_to_all_single`` across nodes (module docstring): slice q along dim 0 of rank r's ``inp`` is slice
    r of q's ``out``."""
    caller = "ccl.all_to_all_single"
    inp_flat, out_flat = common.flat(inp, caller, "inp"), common.flat(out, caller, "out")
    common.same_dtype(out, inp, caller)
    common.expect_numel(out, inp.numel(), caller, "out", "inp.numel()")
    nodes, local = _shape(ctx)
    n = common.split_rows(inp, ctx.num_ranks, caller, "inp")
    by_local = _scratch(ctx, "all_to_all.in", local * nodes * n, inp.dtype)
    by_local.view(local, nodes, n).copy_(inp_flat.view(nodes, local, n).transpose(0, 1))
    arrived = _scratch(ctx, "all_to_all.node", local * nodes * n, inp.dtype)  # [from local l', to node m', n]
    if local == 1:
        arrived.copy_(by_local)
    else:
        node_all_to_all(ctx, arrived, by_local, group=ctx.node_group)
    by_node = _scratch(ctx, "all_to_all.rail", nodes * local * n, inp.dtype)
    by_node.view(nodes, local, n).copy_(arrived.view(local, nodes, n).transpose(0, 1))
    ctx.rail.all_to_all(out_flat, by_node)  # [from node m', from local l', n]: source ranks in order
    return common.done(ctx, async_op)


def broadcast(ctx, tensor, src=0, group=None, async_op=False, config=None):
    """``ccl.broadcast`` across nodes (module docstring): every rank's ``tensor`` becomes ``src``'s."""
    caller = "ccl.broadcast"
    flat = common.flat(tensor, caller, "tensor")
    ctx.check_rank(src, caller, "src")
    _broadcast(ctx, flat, src)
    return common.done(ctx, async_op)


def _broadcast(ctx, flat, src):
    nodes, local = _shape(ctx)
    root_node, root_local = divmod(src, local)
    n = flat.numel()
    piece_len = triton.cdiv(n, local)
    whole = _scratch(ctx, "broadcast.whole", piece_len * local, flat.dtype)
    if ctx.node == root_node:
        if ctx.cur_rank == src:
            whole[:n].copy_(flat)
        if local > 1:
            node_broadcast(ctx, whole, src=src, group=ctx.node_group)
    piece = whole[ctx.local_rank * piece_len:(ctx.local_rank + 1) * piece_len]
    ctx.rail.broadcast(piece, root_node)
    # made on every rank, the root's node too: making a workspace is a heap allocation, which every rank must make
    # alike (a rank that skips one reaches the next agreement on frees at another call than its peers: a hang)
    gathered = _scratch(ctx, "broadcast.gathered", piece_len * local, flat.dtype)
    if ctx.node != root_node:
        _node_all_gather(ctx, gathered, piece)
        whole = gathered
    if ctx.cur_rank != src:
        flat.copy_(whole[:n])


def reduce(ctx, out, inp, dst=0, op="sum", group=None, async_op=False, config=None):
    """``ccl.reduce`` across nodes: an all_reduce whose result ``dst`` keeps."""
    caller = "ccl.reduce"
    inp_flat, out_flat, op = _reduce_checks(ctx, caller, out, inp, op)
    ctx.check_rank(dst, caller, "dst")
    common.expect_numel(out, inp.numel(), caller, "out", "inp.numel()")
    result = _scratch(ctx, "reduce.out", inp.numel(), inp.dtype)
    _all_reduce(ctx, result, inp_flat, op)
    if ctx.cur_rank == dst:
        out_flat.copy_(result)
    return common.done(ctx, async_op)


def gather(ctx, out, inp, dst=0, group=None, async_op=False, config=None):
    """``ccl.gather`` across nodes: an all_gather whose result ``dst`` keeps."""
    caller = "ccl.gather"
    ctx.check_rank(dst, caller, "dst")
    inp_flat = common.flat(inp, caller, "inp")
    result = _scratch(ctx, "gather.out", ctx.num_ranks * inp.numel(), inp.dtype)
    all_gather(ctx, result, inp_flat)
    if ctx.cur_rank == dst:
        common.expect_numel(out, result.numel(), caller, "out", f"world size {ctx.num_ranks} * inp.numel()")
        common.flat(out, caller, "out").copy_(result)
    return common.done(ctx, async_op)


def scatter(ctx, out, inp, src=0, group=None, async_op=False, config=None):
    """``ccl.scatter`` across nodes: ``src``'s ``inp`` broadcast, of which each rank keeps its slice."""
    caller = "ccl.scatter"
    ctx.check_rank(src, caller, "src")
    out_flat = common.flat(out, caller, "out")
    n = out_flat.numel()
    whole = _scratch(ctx, "scatter.in", ctx.num_ranks * n, out.dtype)
    if ctx.cur_rank == src:
        inp_flat = common.flat(inp, caller, "inp")
        common.expect_numel(inp, whole.numel(), caller, "inp", f"world size {ctx.num_ranks} * out.numel()")
        whole.copy_(inp_flat)
    _broadcast(ctx, whole, src)
    out_flat.copy_(whole[ctx.cur_rank * n:(ctx.cur_rank + 1) * n])
    return common.done(ctx, async_op)


def send(ctx, tensor, dst, async_op=False, config=None):
    """``ccl.send`` to a rank of this node (another node's heap is not mapped: ``ctx.check_direct`` raises)."""
    ctx.check_direct(dst, "ccl.send", "dst")
    return node_send(ctx, tensor, dst, async_op=async_op, config=config)


def recv(ctx, tensor, src, async_op=False, config=None):
    """``ccl.recv`` from a rank of this node (``send``)."""
    ctx.check_direct(src, "ccl.recv", "src")
    return node_recv(ctx, tensor, src, async_op=async_op, config=config)


def all_reduce_rmsnorm(ctx, out, residual_out, inp, residual, weight, eps=1e-6, group=None, config=None):
    """``ccl.all_reduce_rmsnorm`` across nodes: the hierarchical all_reduce, then the add and the norm in fp32 with
    torch on this rank (the sum is rounded to the input dtype once more than on one node)."""
    caller = "ccl.all_reduce_rmsnorm"
    summed = _scratch(ctx, "rmsnorm.sum", inp.numel(), inp.dtype)
    _all_reduce(ctx, summed, common.flat(inp, caller, "inp"), "sum")
    total = summed.view(inp.shape).float() + residual.float()
    normed = total * torch.rsqrt(total.pow(2).mean(-1, keepdim=True) + eps) * weight.float()
    residual_out.copy_(total)
    out.copy_(normed)
    return out, residual_out


def barrier(ctx, group=None):
    """Collective over the world: node device barrier, rail barrier, node device barrier. Stream-ordered and
    graph-capturable on NCCL; host-blocking on gloo."""
    if ctx.local_world_size > 1:
        ctx.device_barrier(ctx.node_group)
    ctx.rail.barrier()
    if ctx.local_world_size > 1:
        ctx.device_barrier(ctx.node_group)
