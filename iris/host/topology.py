"""Node topology: which ranks share a node, and so which peers' heaps this process can map.

A node is the set of ranks whose heaps can be mapped into one another (one NVLink domain on GPUs, one host's
shared memory on the cpu backend). Ranks are grouped by a host id: ``IRIS_NODE_ID`` when set, else the host
name. A launcher that simulates several nodes on one machine sets ``IRIS_NODE_ID`` per simulated node
(``iris.launch(..., nodes=N)`` does; two ``torchrun`` agents on one host need it set by hand), so that the
ranks of one simulated node never map another's segments.

Layout rules (those of a 2-D ``(nodes, local)`` mesh, and torchrun's): every node holds the same number of
ranks, ``L = local_world_size``, and node ``n`` holds the contiguous ranks ``[n * L, (n + 1) * L)``. So rank
``r`` is local rank ``r % L`` of node ``r // L``, and its rail (the ranks with its local rank on every node)
is ``[l, L + l, 2L + l, ...]``. Anything else is refused at context creation with the layout it found.

Off-node entries of a bases table hold ``off_node_code(node, peer_node)`` (negative: never an address), which
debug mode decodes to name both nodes (``iris/device/debug.py``).
"""

import os
import socket
from dataclasses import dataclass

import torch
import torch.distributed as dist

NODE_ID_ENV = "IRIS_NODE_ID"
NODE_BITS = 16  # an off-node code packs two node indices of up to 16 bits each


def host_id():
    """This process's host id: ``IRIS_NODE_ID`` if set (simulated nodes), else the host name."""
    return os.environ.get(NODE_ID_ENV) or socket.gethostname()


def off_node_code(node, peer_node):
    """The bases-table entry for a peer on ``peer_node`` seen from ``node``: ``-(1 + node << 16 | peer_node)``."""
    return -(1 + ((node << NODE_BITS) | peer_node))


@dataclass(frozen=True)
class Topology:
    """``num_nodes`` nodes of ``local_world_size`` ranks each; this rank is ``local_rank`` of ``node``."""

    rank: int
    world_size: int
    num_nodes: int
    local_world_size: int
    host_ids: tuple  # by node

    @property
    def node(self):
        return self.rank // self.local_world_size

    @property
    def local_rank(self):
        return self.rank % self.local_world_size

    def node_of(self, rank):
        return rank // self.local_world_size

    def node_ranks(self, node=None):
        """The global ranks of ``node`` (default: ours), ascending."""
        node = self.node if node is None else node
        return list(range(node * self.local_world_size, (node + 1) * self.local_world_size))

    def rail_ranks(self, local_rank=None):
        """The global ranks with local rank ``local_rank`` (default: ours) on every node, by node."""
        local_rank = self.local_rank if local_rank is None else local_rank
        return [n * self.local_world_size + local_rank for n in range(self.num_nodes)]

    @property
    def direct(self):
        """Per global rank: whether this process maps its heap (same node), upstream's ``direct`` flags."""
        return tuple(self.node_of(r) == self.node for r in range(self.world_size))

    def spans_nodes(self, ranks):
        return len({self.node_of(r) for r in ranks}) > 1

    def world_bases(self, local_bases):
        """The world's bases table from this node's: real addresses for our node's ranks, off-node codes else."""
        assert len(local_bases) == self.local_world_size
        first = self.node * self.local_world_size
        return [local_bases[r - first] if self.node_of(r) == self.node else off_node_code(self.node, self.node_of(r))
                for r in range(self.world_size)]


def discover(rank, world_size, exchange):
    """Collective: every rank's host id through ``exchange`` (an all-gather of picklable objects), grouped into
    nodes. Raises ``ValueError`` naming the layout when nodes are uneven or their ranks are not contiguous."""
    ids = exchange(host_id())
    order = list(dict.fromkeys(ids))  # host ids by first rank
    ranks_of = {h: [r for r, i in enumerate(ids) if i == h] for h in order}
    sizes = {len(r) for r in ranks_of.values()}
    layout = "; ".join(f"{h!r}: ranks {r}" for h, r in ranks_of.items())
    if len(sizes) != 1:
        raise ValueError(f"iris.iris: uneven nodes ({layout}); every node must run the same number of ranks "
                         "(torchrun --nproc-per-node=L on every node, or iris.launch(..., nodes=N) with world_size "
                         "a multiple of N)")
    local = sizes.pop()
    for n, h in enumerate(order):
        if ranks_of[h] != list(range(n * local, (n + 1) * local)):
            raise ValueError(f"iris.iris: the ranks of a node are not contiguous ({layout}); node n must hold ranks "
                             f"[n * {local}, (n + 1) * {local}), as torchrun numbers them; set {NODE_ID_ENV} per node "
                             "consistently or launch with torchrun")
    if len(order) >= 1 << NODE_BITS:
        raise ValueError(f"iris.iris: {len(order)} nodes; at most {(1 << NODE_BITS) - 1} are supported")
    return Topology(rank, world_size, len(order), local, tuple(order))


def rail_backend(backend):
    """The inter-node engine: ``IRIS_RAIL_BACKEND`` if set, else NCCL on GPUs and gloo on the cpu backend."""
    name = os.environ.get("IRIS_RAIL_BACKEND", "").strip().lower() or ("gloo" if backend == "cpu" else "nccl")
    if name not in ("nccl", "gloo"):
        raise ValueError(f"IRIS_RAIL_BACKEND={name!r}: use 'nccl' or 'gloo'")
    return name


def make_groups(topology, backend):
    """Collective over the world, once per context: this rank's node group (gloo: iris kernels do the node's
    work, the group only names its members) and rail group (the inter-node engine). Every rank makes every
    node's and every rail's group, in one order, as ``torch.distributed.new_group`` requires."""
    import torch.distributed as dist

    node_group = rail_group = None
    for n in range(topology.num_nodes):
        group = dist.new_group(topology.node_ranks(n), backend="gloo")
        if n == topology.node:
            node_group = group
    engine = rail_backend(backend)
    for l in range(topology.local_world_size):
        group = dist.new_group(topology.rail_ranks(l), backend=engine)
        if l == topology.local_rank:
            rail_group = group
    return node_group, rail_group, engine


class TopologyMethods:
    """The context's answers about ranks, groups and nodes, and the device each rank runs on (a part of ``Iris``):
    from ``self.topology``, ``self.cur_rank``, ``self.num_ranks``, ``self._device`` and ``self._agreed_cu_count``."""

    def get_rank(self) -> int:
        """This process's rank in the default process group.

        Example::

            assert ctx.get_rank() == dist.get_rank()
            assert 0 <= ctx.get_rank() < ctx.get_num_ranks()
        """
        return self.cur_rank

    def get_num_ranks(self) -> int:
        """Number of ranks (the world size).

        Example::

            assert ctx.get_num_ranks() == dist.get_world_size()
        """
        return self.num_ranks

    def get_device(self) -> torch.device:
        """The ``torch.device`` that holds this rank's heap (``cpu`` on the cpu backend).

        Example::

            x = ctx.zeros(4)
            assert x.device == ctx.get_device()
            scratch = torch.ones(4, device=ctx.get_device())  # off the heap, on the same device
        """
        return self._device

    def get_device_id(self) -> int:
        """The GPU index of this rank (several ranks share one in simulation mode); 0 on the cpu backend.

        Example::

            device_id = ctx.get_device_id()  # what torch.cuda.set_device takes in a thread of this rank
            assert device_id == (ctx.get_device().index or 0)
        """
        return self._device.index if self._device.type == "cuda" else 0

    def get_cu_count(self) -> int:
        """Streaming multiprocessors of this rank's GPU (the CPU count on the cpu backend).

        Example::

            sms = ctx.get_cu_count()  # 132 on an H100 SXM
            assert sms >= ctx.get_agreed_cu_count() >= 1
        """
        if self._device.type == "cuda":
            return torch.cuda.get_device_properties(self._device).multi_processor_count
        return os.cpu_count()

    def get_agreed_cu_count(self) -> int:
        """The smallest ``get_cu_count()`` over the ranks, exchanged once at context creation: what a kernel whose
        programs wait for their peers' same-numbered programs sizes its grid from, so that ranks on GPUs of
        different kinds launch the same grid (and every program stays resident on each).

        Example::

            grid = (min(ctx.get_agreed_cu_count(), 64),)  # the same on every rank
            assert ctx.broadcast(grid, src=0) == grid
        """
        return self._agreed_cu_count

    @property
    def num_nodes(self):
        """Nodes in the job: sets of ranks whose heaps map into one another (``IRIS_NODE_ID`` or the host name)."""
        return self.topology.num_nodes

    @property
    def node(self):
        """This rank's node, in ``[0, num_nodes)``; node n holds ranks ``[n * L, (n + 1) * L)``."""
        return self.topology.node

    @property
    def local_rank(self):
        """This rank's position in its node (``rank % local_world_size``)."""
        return self.topology.local_rank

    @property
    def local_world_size(self):
        """Ranks per node, ``L``: the same on every node."""
        return self.topology.local_world_size

    @property
    def direct(self):
        """Per rank: whether device code can reach its heap by load/store (same node), upstream's ``direct``."""
        return self.topology.direct

    def spans_nodes(self, group: dist.ProcessGroup | None, caller: str) -> bool:
        """Whether ``group`` (None: the world) holds ranks of several nodes; such a group must be the world, which
        the collectives run hierarchically (``iris/ccl/multinode/hierarchical.py``). Local.

        Raises ``ValueError`` naming ``caller`` for a group that spans nodes but is not the world, and
        ``group_ranks``'s errors.

        Example::

            assert ctx.spans_nodes(None, "mylib.exchange") == (ctx.num_nodes > 1)
        """
        ranks = self.group_ranks(group, caller)
        if not self.topology.spans_nodes(ranks):
            return False
        if len(ranks) != self.num_ranks:
            nodes = sorted({self.topology.node_of(r) for r in ranks})
            raise ValueError(f"{caller}: the group {ranks} spans nodes {nodes} but is not the world; across nodes "
                             "the collectives run on the whole world; use a group within one node, or "
                             "torch.distributed on a group of the NCCL/gloo backend")
        return True

    def check_direct(self, peer: int, caller: str, name: str = "peer") -> int:
        """``peer``, checked to be a rank whose heap is mapped here (this node): host calls taking a peer rank call it
        first. Local.

        Raises ``ValueError`` naming ``caller`` and ``name`` when ``peer`` is out of range (``check_rank``) or on
        another node.

        Example::

            peer = ctx.check_direct((rank + 1) % world_size, "mylib.send", "peer")
            assert ctx.direct[peer]  # one node here: every rank is direct
        """
        self.check_rank(peer, caller, name)
        if not self.topology.direct[peer]:
            raise ValueError(f"{caller}: {name}={peer} is on node {self.topology.node_of(peer)} and rank "
                             f"{self.cur_rank} on node {self.node}; heaps are mapped within a node only, so only "
                             f"ranks {self.topology.node_ranks()} can be reached directly; move data between nodes "
                             "with the collectives (ctx.ccl) or torch.distributed")
        return peer

    def check_rank(self, rank: int, caller: str, name: str = "rank") -> int:
        """``rank``, checked to be an int in ``[0, world_size)``. Local.

        Raises ``ValueError`` naming ``caller``, ``name`` and the range otherwise.

        Example::

            assert ctx.check_rank(world_size - 1, "mylib.send", "peer") == world_size - 1
            try:
                ctx.check_rank(world_size, "mylib.send", "peer")
                assert False, "unreachable: check_rank raises"
            except ValueError as e:
                assert str(e).startswith(f"mylib.send: peer={world_size} is outside [0, {world_size})")
        """
        if not isinstance(rank, int) or isinstance(rank, bool):
            raise ValueError(f"{caller}: {name}={rank!r} is a {type(rank).__name__}, not a rank: pass an int in "
                             f"[0, {self.num_ranks})")
        if not 0 <= rank < self.num_ranks:
            raise ValueError(f"{caller}: {name}={rank!r} is outside [0, {self.num_ranks}); ranks run from 0 to "
                             f"world_size - 1 = {self.num_ranks - 1}")
        return rank

    def group_ranks(self, group: dist.ProcessGroup | None, caller: str) -> list[int]:
        """The sorted ranks of ``group`` (a ``ProcessGroup``, or None for every rank). Local.

        Raises ``TypeError`` naming ``caller`` when ``group`` is not a ``ProcessGroup`` or None, and ``ValueError``
        when this rank is not a member of it.

        Example::

            assert ctx.group_ranks(None, "mylib.exchange") == list(range(world_size))
            try:
                ctx.group_ranks([0, 1], "mylib.exchange")  # a list of ranks is no group
                assert False, "unreachable: group_ranks raises"
            except TypeError as e:
                assert "torch.distributed.new_group" in str(e)
        """
        if group is None:
            return list(range(self.num_ranks))
        if isinstance(group, int) and group == dist.GroupMember.NON_GROUP_MEMBER:  # new_group's on ranks left out
            raise ValueError(f"{caller}: rank {self.cur_rank} is not a member of the group")
        if not isinstance(group, dist.ProcessGroup):
            raise TypeError(f"{caller}: group must be a torch.distributed ProcessGroup or None, got "
                            f"{type(group).__name__}; make one with torch.distributed.new_group(ranks)")
        ranks = dist.get_process_group_ranks(group)
        if self.cur_rank not in ranks:
            raise ValueError(f"{caller}: rank {self.cur_rank} is not a member of the group {ranks}")
        return sorted(ranks)
