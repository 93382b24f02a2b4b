"""Several nodes (iris/host/topology.py, iris/ccl/multinode/hierarchical.py): nodes simulated on one host by a host
id per node (IRIS_NODE_ID), against gloo's results on the world group.

One pool per world size: a body sets IRIS_NODE_ID for the layout it checks before making its context, so the
four-rank pool serves (1, 4), (2, 2) and (4, 1), the six-rank pool (2, 3) and (3, 2). Every layout checks the
topology, the mappings, all_reduce and that iris binds or connects no network socket of its own; (2, 2) and
(2, 3) check every collective, the iris torch.distributed backend and the bytes handed to the inter-node stage.
A third pool, started by the launcher's nodes=2 in debug mode, checks the errors for off-node access and ends with
a peer killed on the other node.
"""

import contextlib
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest
import torch
import torch.distributed as dist
import triton
import triton.language as tl

import iris
from conftest import on_gpu
from rank_utils import error_message, rank_data

N = 37  # all_reduce / broadcast elements: not a multiple of any node size, so the shards are padded
CHUNK = 3  # elements per rank's slice in all_gather, reduce_scatter and all_to_all
# debug mode for the off-node checks; its bound on device waits far above the watchdog's detection of a killed rank
# (a poll of the interpreter takes about a millisecond: 20000 are seconds), so the peers fail on the death they saw
DEBUG_ENV = {"IRIS_DEBUG": "1", "IRIS_DEBUG_SPIN_LIMIT": "20000"}
FAST_S = 10.0  # a failure reaches every rank within the watchdog's polls, far below the pool's grace of 15 s


def _gloo(fn, tensor, *args):
    """``fn`` (a torch.distributed call) on the world group, on the cpu: the reference (int16, which gloo does not
    reduce, in int32)."""
    wide = tensor.cpu().to(torch.int32 if tensor.dtype == torch.int16 else tensor.dtype)
    fn(wide, *args)
    return wide.to(tensor.dtype)


def _mapped_segments():
    """Paths of the iris heap segments this process maps now (/proc/self/maps)."""
    with open("/proc/self/maps") as f:
        return {line.split()[5] for line in f if "/iris-" in line and "-r" in line and len(line.split()) > 5}


def _check_topology(ctx, nodes):
    local = ctx.num_ranks // nodes
    rank = ctx.get_rank()
    found = (ctx.num_nodes, ctx.node, ctx.local_rank, ctx.local_world_size)
    assert found == (nodes, rank // local, rank % local, local), found
    assert ctx.direct == tuple(r // local == rank // local for r in range(ctx.num_ranks)), ctx.direct
    bases = ctx.get_heap_bases().tolist()
    assert all((b > 0) == d for b, d in zip(bases, ctx.direct)), bases
    if ctx.get_device().type == "cpu":
        paths = ctx.heap.memory.paths  # our node's segments, by local rank
        everyone = [p for node_paths in iris.host.distributed.all_gather_object(paths) for p in node_paths]
        mapped = {p.removesuffix(" (deleted)") for p in _mapped_segments()}
        assert set(paths) <= mapped and not (set(everyone) - set(paths)) & mapped, (paths, mapped)
    else:
        assert len(ctx.heap.memory._opened) == local - 1


def _all_reduce(ctx, dtype, op="sum"):
    rank = ctx.get_rank()
    inp = ctx.empty(N, dtype=dtype)
    inp.copy_(rank_data(rank, N, dtype, inp.device, salt=1))
    tri = ctx.full((N,), -77, dtype=dtype)
    ctx.ccl.all_reduce(tri, inp, op=op)
    ref = _gloo(dist.all_reduce, inp, {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX}[op])
    if dtype.is_floating_point:
        torch.testing.assert_close(tri.cpu(), ref, rtol=1e-2, atol=1e-2)
        bits = iris.host.distributed.all_gather_object(tri.cpu().view(torch.int16 if dtype.itemsize == 2 else
                                                                      torch.int32).tolist())
        assert all(b == bits[0] for b in bits), "all_reduce results differ between ranks"
    else:
        assert torch.equal(tri.cpu(), ref), (tri, ref)
    return tri.cpu()


def _every_collective(ctx):
    """Every collective of ctx.ccl across nodes against gloo, and the bytes each hands to the rail. Returns the
    integer results."""
    rank, world, nodes, local = ctx.get_rank(), ctx.num_ranks, ctx.num_nodes, ctx.local_world_size
    dtype = torch.int32
    item = dtype.itemsize
    results = {}
    mine = rank_data(rank, CHUNK, dtype, ctx.get_device(), salt=2)
    every = [rank_data(r, CHUNK, dtype, "cpu", salt=2) for r in range(world)]

    tri = ctx.full((world * CHUNK,), -77, dtype=dtype)
    ctx.rail.reset()
    ctx.ccl.all_gather(tri, mine)
    assert torch.equal(tri.cpu(), torch.cat(every)), tri
    assert ctx.rail.bytes_handed == CHUNK * item  # its own slice: the node's L slices over L ranks
    results["all_gather"] = tri.cpu()

    wide = ctx.empty(world * CHUNK, dtype=dtype)
    wide.copy_(rank_data(rank, world * CHUNK, dtype, wide.device, salt=3))
    tri = ctx.full((CHUNK,), -77, dtype=dtype)
    ctx.rail.reset()
    ctx.ccl.reduce_scatter(tri, wide)
    ref = _gloo(dist.all_reduce, wide)[rank * CHUNK:(rank + 1) * CHUNK]
    assert torch.equal(tri.cpu(), ref), (tri, ref)
    assert ctx.rail.bytes_handed == nodes * CHUNK * item  # the node's reduced W slices over L ranks
    results["reduce_scatter"] = tri.cpu()

    splits = [max(CHUNK - r % 3, 0) for r in range(world)]  # uneven: the hierarchical all_reduce, then this rank's range
    start = sum(splits[:rank])
    tri = ctx.full((splits[rank],), -77, dtype=dtype)
    ctx.ccl.reduce_scatter_v(tri, wide[:sum(splits)], splits)
    ref = _gloo(dist.all_reduce, wide)[start:start + splits[rank]]
    assert torch.equal(tri.cpu(), ref), (tri, ref)

    tri = ctx.full((world * CHUNK,), -77, dtype=dtype)
    ctx.rail.reset()
    ctx.ccl.all_to_all(tri, wide)
    ref = torch.empty(world * CHUNK, dtype=dtype)
    dist.all_to_all_single(ref, wide.cpu())
    assert torch.equal(tri.cpu(), ref), (tri, ref)
    assert ctx.rail.bytes_handed == world * CHUNK * item  # the node's L * W slices over L ranks
    results["all_to_all"] = tri.cpu()

    # upstream's layout, (M, N * W) split along dim 1: column block q of every rank's input, in rank order, is q's
    rows = 2
    cols = [rank_data(r, rows * world * CHUNK, dtype, "cpu", salt=5).view(rows, world * CHUNK) for r in range(world)]
    tri = ctx.full((rows, world * CHUNK), -77, dtype=dtype)
    ctx.ccl.all_to_all(tri, cols[rank].to(tri.device))
    ref = torch.cat([c[:, rank * CHUNK:(rank + 1) * CHUNK] for c in cols], dim=1)
    assert torch.equal(tri.cpu(), ref), (tri, ref)
    full = ctx.empty(world * CHUNK, dtype=dtype)
    assert "runs within one node only" in error_message(ctx.ccl.reduce_scatter, full, wide)

    root = world - 1
    data = rank_data(root, N, dtype, ctx.get_device(), salt=4)
    tri = data.clone() if rank == root else torch.full((N,), -77, dtype=dtype, device=ctx.get_device())
    ctx.rail.reset()
    ctx.ccl.broadcast(tri, src=root)
    assert torch.equal(tri, data), tri
    handed = triton.cdiv(N, local) * item if rank // local == root // local else 0
    assert ctx.rail.bytes_handed == handed, (ctx.rail.bytes_handed, handed)  # the root node's ranks: 1/L each
    # heap allocations are collective: every rank made the same ones (a rooted call's workspace made on some ranks
    # only sends them to the next agreement on frees at different calls, and they hang there)
    from iris.host.distributed import all_gather_object

    allocs = all_gather_object(ctx.heap.stats["num_allocs"])
    assert len(set(allocs)) == 1, f"heap allocations by rank: {allocs}"

    ctx.rail.reset()
    _all_reduce(ctx, dtype)
    assert ctx.rail.bytes_handed == triton.cdiv(N, local) * item  # its shard
    results["all_reduce_max"] = _all_reduce(ctx, torch.int16, "max")

    inp = ctx.empty(N, dtype=dtype)
    inp.copy_(rank_data(rank, N, dtype, inp.device, salt=1))
    out = ctx.full((N,), -77, dtype=dtype)
    ctx.ccl.reduce(out, inp, dst=1)
    ref = _gloo(dist.all_reduce, inp)  # collective: on every rank
    if rank == 1:
        assert torch.equal(out.cpu(), ref), out
    gathered = ctx.full((world * CHUNK,), -77, dtype=dtype)
    ctx.ccl.gather(gathered, mine, dst=0)
    if rank == 0:
        assert torch.equal(gathered.cpu(), torch.cat(every)), gathered
    scattered = ctx.full((CHUNK,), -77, dtype=dtype)
    source = rank_data(0, world * CHUNK, dtype, ctx.get_device(), salt=5)
    ctx.ccl.scatter(scattered, source, src=0)
    assert torch.equal(scattered, source[rank * CHUNK:(rank + 1) * CHUNK]), scattered
    ctx.ccl.barrier()
    ctx.device_barrier()

    # torch.distributed on the "iris" backend: the same hierarchical algorithms underneath
    import iris.distributed

    iris.distributed.set_context(ctx)
    group = dist.new_group(backend="iris")
    plain = rank_data(rank, N, dtype, ctx.get_device(), salt=6)
    tri = plain.clone()
    dist.all_reduce(tri, group=group)
    assert torch.equal(tri.cpu(), _gloo(dist.all_reduce, plain)), tri
    tri = torch.empty(world * CHUNK, dtype=dtype, device=ctx.get_device())
    dist.all_gather_into_tensor(tri, mine, group=group)
    assert torch.equal(tri.cpu(), torch.cat(every)), tri
    dist.barrier(group=group)
    return results


@contextlib.contextmanager
def _network_sockets():
    """Yields the list of (family, address) of every socket this process's Python code binds or connects to,
    but for the Unix sockets a node's ranks pass heap handles over. torch.distributed's own connections (its store,
    gloo's and NCCL's) are made in C++ and do not pass here: what lands in the list is a connection of iris's own."""
    opened = []
    bind, connect, connect_ex = socket.socket.bind, socket.socket.connect, socket.socket.connect_ex

    def watched(method):
        def call(self, address, *args):
            if self.family != socket.AF_UNIX:
                opened.append((self.family.name, address))
            return method(self, address, *args)
        return call

    socket.socket.bind, socket.socket.connect = watched(bind), watched(connect)
    socket.socket.connect_ex = watched(connect_ex)
    try:
        yield opened
    finally:
        socket.socket.bind, socket.socket.connect, socket.socket.connect_ex = bind, connect, connect_ex


def _layout_body(nodes, full):
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = world // nodes
    os.environ["IRIS_NODE_ID"] = f"layout-{nodes}x{local}-node{rank // local}"
    with _network_sockets() as opened:
        try:
            ctx = iris.iris(1 << 18)
        finally:
            del os.environ["IRIS_NODE_ID"]
        try:
            _check_topology(ctx, nodes)
            results = {"all_reduce": _all_reduce(ctx, torch.int32)}
            _all_reduce(ctx, torch.float32)
            _all_reduce(ctx, torch.bfloat16)
            if full:
                results.update(_every_collective(ctx))
            ctx.barrier()
        finally:
            ctx.close()
    assert not opened, f"iris opened network sockets of its own: {opened}"  # the rail is torch.distributed's
    return results


def _run_layouts(pool, layouts):
    return {nodes: pool.run(_layout_body, nodes, full) for nodes, full in layouts}


def test_layouts_of_four_ranks(pools):
    """(1, 4), (2, 2), (4, 1): the same inputs give the same integer results on one node as on two or four."""
    found = _run_layouts(pools(4), [(1, False), (2, True), (4, False)])
    for rank in range(4):
        assert torch.equal(found[1][rank]["all_reduce"], found[2][rank]["all_reduce"])
        assert torch.equal(found[4][rank]["all_reduce"], found[2][rank]["all_reduce"])


def test_layouts_of_six_ranks(pools):
    """(2, 3) with every collective, (3, 2) with all_reduce."""
    found = _run_layouts(pools(6), [(2, True), (3, False)])
    for rank in range(6):
        assert torch.equal(found[2][rank]["all_reduce"], found[3][rank]["all_reduce"])


def _uneven_body(layout):
    rank = int(os.environ["RANK"])
    os.environ["IRIS_NODE_ID"] = f"bad-{layout[rank]}"
    try:
        return error_message(iris.iris, 1 << 16)
    finally:
        del os.environ["IRIS_NODE_ID"]


@pytest.mark.parametrize("layout,message", [("aaab", "uneven nodes"), ("abab", "not contiguous")])
def test_bad_layouts_are_refused(pools, layout, message):
    for error in pools(4).run(_uneven_body, layout):
        assert message in error and "'bad-a': ranks [0" in error, error


@triton.jit
def _store_to_peer_kernel(dst, heap_bases, rank, peer, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    iris.store(dst + offs, offs, rank, peer, heap_bases)


def _off_node_body():
    """Ranks 0, 1 on node 0 and 2, 3 on node 1 (the launcher's nodes=2); debug mode."""
    ctx = iris.iris(1 << 16)
    rank = ctx.get_rank()
    other = (rank + 2) % 4
    buf = ctx.zeros(16, dtype=torch.int32)
    from iris.host.memory.peers import peer_view

    rails = [dist.new_group([0, 2]), dist.new_group([1, 3])]  # every rank makes both, in one order

    found = {
        "env": (os.environ["IRIS_NODE_ID"], os.environ["LOCAL_RANK"], os.environ["GROUP_RANK"]),
        "device": error_message(lambda: _store_to_peer_kernel[(1,)](buf, ctx.get_heap_bases(), rank, other, BLOCK=16)),
        "untouched": int(buf.abs().sum()),
        "host": error_message(peer_view, ctx, buf, other),
        "send": error_message(ctx.ccl.send, buf, other),
        "ops": error_message(ctx.ops.matmul_all_reduce, ctx.zeros(4, 4), ctx.ones(4, 4), ctx.ones(4, 4)),
        "subgroup": error_message(ctx.ccl.all_reduce, buf, buf, group=rails[rank % 2]),
    }
    ctx.barrier()  # every rank has looked at its untouched buf before a neighbour writes into it
    neighbour = rank ^ 1  # same node: allowed
    _store_to_peer_kernel[(1,)](buf, ctx.get_heap_bases(), rank, neighbour, BLOCK=16)
    ctx.barrier()
    found["neighbour_wrote"] = buf.tolist() == list(range(16))
    ctx.close()
    return found


def _killed_on_other_node_body():
    ctx = iris.iris(1 << 16)
    inp, out = ctx.ones(64), ctx.zeros(64)
    ctx.ccl.all_reduce(out, inp)
    ctx.barrier()
    if ctx.get_rank() == 3:
        time.sleep(1.0)  # the others are in the all_reduce by now, ranks 0 and 1 in the rail's gloo call
        os.kill(os.getpid(), signal.SIGKILL)
    ctx.ccl.all_reduce(out, inp)
    return "all_reduce returned"


@pytest.mark.skipif(on_gpu(), reason="the device check's assert ends the CUDA context; test_debug's GPU form")
def test_off_node_access_and_failure():
    with iris.RankPool(4, env=DEBUG_ENV, nodes=2) as pool:
        for rank, found in enumerate(pool.run(_off_node_body)):
            node, other = rank // 2, 1 - rank // 2
            assert found["env"][1:] == (str(rank % 2), str(node)) and found["env"][0].endswith(f"-node{node}")
            assert "iris.store: a rank on another node" in found["device"], found["device"]
            assert found["untouched"] == 0
            names = f"on node {other} and rank {rank} on node {node}"
            assert "peer_address: peer=" in found["host"] and names in found["host"], found["host"]
            assert "ccl.send: dst=" in found["send"] and names in found["send"], found["send"]
            assert "ops.matmul_all_reduce: single node only" in found["ops"], found["ops"]
            assert "spans nodes [0, 1] but is not the world" in found["subgroup"], found["subgroup"]
            assert found["neighbour_wrote"]
        start = time.monotonic()
        with pytest.raises(iris.RankError) as info:
            pool.run(_killed_on_other_node_body, timeout_s=120)
        elapsed = time.monotonic() - start
    message = str(info.value)
    assert "rank 3 died: killed by signal 9" in message, message
    for rank in range(3):
        section = message[message.index(f"--- rank {rank} ---"):]
        section = section[:section.find("--- rank ", 5)] if "--- rank " in section[5:] else section
        assert "PeerError" in section and "peer rank 3" in section, section
    assert elapsed < FAST_S, f"the ranks failed after {elapsed:.1f} s\n{message}"


_TORCHRUN_SCRIPT = """
import os
import pathlib
import torch
import iris

ctx = iris.iris(1 << 16)
inp = ctx.full((5,), ctx.get_rank() + 1, dtype=torch.int32)
out = ctx.zeros(5, dtype=torch.int32)
ctx.ccl.all_reduce(out, inp)
result = f"RESULT {ctx.get_rank()} {ctx.num_nodes} {ctx.node} {ctx.local_rank} {ctx.direct} {out.tolist()}"
pathlib.Path(os.environ["RESULT_DIR"], f"rank{ctx.get_rank()}").write_text(result)
ctx.close()
"""


def test_two_torchrun_agents(tmp_path):
    """Two torchrun agents with --nnodes=2 on one host, one IRIS_NODE_ID each: two nodes of two."""
    script = tmp_path / "two_nodes.py"
    script.write_text(textwrap.dedent(_TORCHRUN_SCRIPT))
    port = iris.host.launcher._free_port()
    agents = []
    for node in range(2):
        env = dict(os.environ, IRIS_NODE_ID=f"agent{node}", IRIS_BACKEND="cpu", TRITON_INTERPRET="1",
                   RESULT_DIR=str(tmp_path))
        env.pop("IRIS_LAUNCH_LOG", None)  # its kernels are the pools' too
        command = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc-per-node=2",
                   f"--node-rank={node}", "--master-addr=127.0.0.1", f"--master-port={port}", str(script)]
        agents.append(subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = [agent.communicate(timeout=300)[0] for agent in agents]
    assert all(agent.returncode == 0 for agent in agents), "\n".join(outputs)[-4000:]
    # One file a rank: the two workers of an agent share its stdout, where their lines can interleave.
    lines = sorted(path.read_text() for path in tmp_path.glob("rank*"))
    expected = [f"RESULT {r} 2 {r // 2} {r % 2} {tuple(r // 2 == q // 2 for q in range(4))} [10, 10, 10, 10, 10]"
                for r in range(4)]
    assert lines == expected, "\n".join(outputs)[-4000:]
