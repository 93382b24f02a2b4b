"""Symmetric memory from any provider: iris's heap, PyTorch's symmetric memory, or a user's own mapping.

The device API never asks where memory came from. ``translate`` turns a pointer into a peer's address with a table
of bases, ``remote = ptr - bases[me] + bases[peer]``, and any table whose entry ``r`` is *this allocation's* address
on rank ``r`` (as this process sees it) serves: iris's heap is one such table for every tensor on it (one uniform
heap), a provider that maps each allocation at its own address gives one table per allocation. So a provider owes
iris exactly this, per allocation:

    SymmetricAddressMap   peer_bases  int64[world_size] on the device: what kernels take in place of heap_bases
                          bases       the same, as Python ints
                          local_rank, world_size, nbytes (the allocation's size: debug mode's bound)

Providers, each with upstream Iris's surface (``allocate_symmetric(*size, dtype) -> (tensor, peer_bases)``,
``allocate_symmetric_map(...) -> (tensor, map)``, ``symmetric_address_map(tensor) -> map``):

- ``HeapProvider``: iris's own heap (``ctx.allocate_symmetric``); tensors free themselves when every rank dropped them.
- ``TorchSymmMemProvider``: ``torch.distributed._symmetric_memory`` (``symm_mem.empty`` + ``rendezvous``), whose
  handle's ``buffer_ptrs`` are the table; zero-copy. The map holds this rank's tensor and torch's handle (this
  process's mappings of the peers' buffers); each peer's buffer is that peer's to keep, through its own tensor or map.
- ``wrap_symmetric(tensor, peer_addresses)``: a tensor and its peers' addresses from anywhere else (NVSHMEM, NCCL
  windows, IPC handles exchanged by hand); checked across the ranks as far as can be (same size and dtype
  everywhere, the local entry is the tensor, the bases' distances aligned, on GPUs every address mapped). The caller
  keeps the peers' memory mapped while a kernel may use the map; iris frees nothing of it.

One table per memory: while a map lives, a second map of any of its bytes must have the same table (the same distance
from this rank's address to every peer's), or it is refused, on every rank of a collective maker, naming the first
map's maker, shape and table; a map asked for again with the very same table is the live one, returned again. So
``find`` never has two answers for one tensor, and a stale table cannot shadow the right one.

Tables are laid out as every bases table iris hands out (``[rank, world_size, bases..., tracing words, extent]``,
``bases_table``): debug mode (``IRIS_DEBUG=1``) checks each translated address against the allocation's own range,
whatever the provider. Ranks index the provider's group (the world unless ``group=`` says otherwise).
"""

import dataclasses
import weakref
from collections.abc import Sequence

import torch
import torch.distributed as dist

from iris.device.debug import TRACE_WORDS
from iris.device.translate import BASE_ALIGNMENT
from iris.host.distributed import Context, all_gather_object
from iris.host.memory.creation import Device


def bases_table(rank, world_size, bases, extent):
    """The words of a device context (``get_device_context``) with tracing off, around ``bases``: the layout
    every table iris hands out has, so that debug mode finds the extent ``bases`` address."""
    return [rank, world_size] + list(bases) + [0] * TRACE_WORDS.value + [extent]


@dataclasses.dataclass(frozen=True, eq=False)
class SymmetricAddressMap:
    """One allocation's address on every rank (module docstring). ``peer_bases`` is what kernels take. Made by the
    providers (``allocate_symmetric_map``, ``symmetric_address_map``) and ``iris.wrap_symmetric``, not by hand.

    Example::

        x, address = ctx.provider.allocate_symmetric_map(64)
        assert address.world_size == world_size and address.local_rank == rank and address.nbytes == 64 * 4
        assert address.bases[rank] == x.data_ptr() and address.peer_bases.tolist() == list(address.bases)
    """
    peer_bases: torch.Tensor
    bases: tuple
    local_rank: int
    world_size: int
    nbytes: int
    owner: object = None  # what the map keeps alive: this rank's tensor (and torch's handle); never a peer's memory
    maker: str = ""       # the function that made the map, for the error that refuses a second table
    shape: tuple = ()     # the tensor it was made for

    def peer_address(self, tensor: torch.Tensor, rank: int) -> int:
        """The address, in this process, of ``tensor``'s counterpart on ``rank`` (``tensor`` inside the allocation).
        Local; unchecked.

        Example::

            x, address = ctx.provider.allocate_symmetric_map(64)
            peer = (rank + 1) % world_size
            assert address.peer_address(x[16:], peer) == address.bases[peer] + 16 * x.element_size()
        """
        return tensor.data_ptr() - self.bases[self.local_rank] + self.bases[rank]


_live = []  # weak references to this process's maps, for ``find`` and ``_claim``


def _alive():
    """The live maps, oldest first (dead references pruned)."""
    maps, alive = [], []
    for ref in _live:
        address = ref()
        if address is not None:
            maps.append(address)
            alive.append(ref)
    _live[:] = alive
    return maps


def find(tensor):
    """The live map whose allocation holds all of ``tensor`` (this rank's addresses), or None: how the collectives
    find the table of a tensor that is not on the heap (``Iris.symmetric_table``). Maps that share bytes share a
    table (``_claim``), so any map that holds the tensor translates it alike."""
    start = tensor.data_ptr()
    end = start + _nbytes(tensor)
    for address in _alive():
        base = address.bases[address.local_rank]
        if base <= start and end <= base + address.nbytes:
            return address
    return None


def _same_table(bases, local_rank, other):
    """Whether ``bases`` (a table with this rank at ``local_rank``) translates as ``other`` does: the same ranks, and
    every peer at the same distance from this rank's address (a rank off this node: the same code)."""
    if len(bases) != other.world_size or local_rank != other.local_rank:
        return False
    shift = bases[local_rank] - other.bases[other.local_rank]
    return all(b == o if b <= 0 or o <= 0 else b - o == shift for b, o in zip(bases, other.bases))


def _describe(bases):
    return "[" + ", ".join(f"{b:#x}" for b in bases) + "]"


def _claim(bases, local_rank, nbytes):
    """``(live map, None)`` when a live map has exactly this table and size (it is reused), ``(None, problem)`` when a
    live map over any of these bytes has another table, else ``(None, None)`` (module docstring)."""
    start = bases[local_rank]
    for address in _alive():
        base = address.bases[address.local_rank]
        if not (nbytes and address.nbytes and base < start + nbytes and start < base + address.nbytes):
            continue
        if not _same_table(bases, local_rank, address):
            return None, (f"bytes [{start:#x}, {start + nbytes:#x}) of this rank already have a live map, made by "
                          f"{address.maker or 'a provider'} for a tensor of shape {tuple(address.shape)} at "
                          f"[{base:#x}, {base + address.nbytes:#x}) with the table {_describe(address.bases)}, and "
                          f"this one's table {_describe(bases)} translates them differently (the collectives would "
                          "use whichever map they found first); drop the first map (and whatever holds it) before "
                          "mapping this memory again, or map it with the same table")
        if tuple(bases) == address.bases and nbytes == address.nbytes:
            return address, None
    return None, None


def _misaligned(bases, local_rank):
    """The ranks whose entry of ``bases`` does not lie a multiple of ``BASE_ALIGNMENT`` bytes from ours: ``translate``
    tells the compiler the distances are such multiples (it keeps accesses vectorised)."""
    return [rank for rank, base in enumerate(bases) if (base - bases[local_rank]) % BASE_ALIGNMENT.value]


def _table_problem(bases, local_rank, nbytes):
    """What makes ``bases`` unusable as a table here, or None: distances that are not multiples of
    ``BASE_ALIGNMENT`` bytes (``translate`` tells the compiler they are), or a live map of these bytes with another
    table (``_claim``)."""
    odd = _misaligned(bases, local_rank)
    if odd:
        listed = ", ".join(f"rank {rank} at {bases[rank]:#x}" for rank in odd)
        return (f"the allocation's address on every rank must lie a multiple of {BASE_ALIGNMENT.value} bytes from "
                f"this rank's ({bases[local_rank]:#x}) for iris's translation (it keeps accesses vectorised); got "
                f"{listed}. Align the allocations to {BASE_ALIGNMENT.value} bytes")
    return _claim(bases, local_rank, nbytes)[1]


def address_map(bases, local_rank, nbytes, device, caller, owner=None, shape=()):
    """A ``SymmetricAddressMap`` of ``bases`` (this allocation's address on each rank), or the live map with exactly
    this table and size; a clear error naming ``caller`` when ``_table_problem`` finds one."""
    bases = tuple(int(b) for b in bases)
    problem = _table_problem(bases, local_rank, nbytes)
    if problem:
        raise ValueError(f"{caller}: {problem}")
    reused, _ = _claim(bases, local_rank, nbytes)
    if reused is not None:
        return reused
    table = torch.tensor(bases_table(local_rank, len(bases), bases, nbytes), dtype=torch.int64, device=device)
    address = SymmetricAddressMap(table[2:2 + len(bases)], bases, local_rank, len(bases), nbytes, owner, caller,
                                  tuple(shape))
    _live.append(weakref.ref(address))
    return address


def _agreed(problem, caller, group):
    """Raise on every rank of ``group`` when any rank's ``problem`` is set, naming each such rank."""
    problems = [f"rank {r}: {p}" for r, p in enumerate(all_gather_object(problem, group=group)) if p]
    if problems:
        raise ValueError(f"{caller}: " + "; ".join(problems))


def _nbytes(tensor):
    return tensor.numel() * tensor.element_size()


class HeapProvider:
    """iris's symmetric heap as a provider: one uniform heap, so a tensor's table is the heap's bases moved by its
    offset. ``ctx.provider`` is this context's. Its methods raise ``iris.ClosedError`` once the context is closed.

    Example::

        provider = ctx.provider  # iris.HeapProvider(ctx)
        x, peer_bases = provider.allocate_symmetric(16, 16)
        assert ctx.is_symmetric(x) and int(peer_bases[rank]) == x.data_ptr()
    """

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx

    def allocate_symmetric_map(self, *size: int | Sequence[int],
                               dtype: torch.dtype | None = None) -> tuple[torch.Tensor, SymmetricAddressMap]:
        """Collective. An uninitialised heap tensor and its ``SymmetricAddressMap``. Raises ``ctx.empty``'s errors.

        Example::

            x, address = ctx.provider.allocate_symmetric_map(8, 8, dtype=torch.bfloat16)
            assert x.shape == (8, 8) and address.bases[rank] == x.data_ptr()
        """
        tensor = self.ctx.empty(*size, dtype=dtype)
        return tensor, self.symmetric_address_map(tensor)

    def allocate_symmetric(self, *size: int | Sequence[int],
                           dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Collective. An uninitialised heap tensor and its ``peer_bases`` (entry r: its address on rank r). Raises
        ``ctx.empty``'s errors.

        Example::

            x, peer_bases = ctx.provider.allocate_symmetric(1024, dtype=torch.int32)
            assert peer_bases.shape == (world_size,) and int(peer_bases[rank]) == x.data_ptr()
        """
        tensor, address = self.allocate_symmetric_map(*size, dtype=dtype)
        return tensor, address.peer_bases

    def symmetric_address_map(self, tensor: torch.Tensor) -> SymmetricAddressMap:
        """Local. The map of a heap tensor (off-node ranks keep the heap table's codes). Raises ``ValueError`` when
        ``tensor`` is not on the heap.

        Example::

            x = ctx.zeros(32)
            address = ctx.provider.symmetric_address_map(x[8:])
            assert address.bases[rank] == x[8:].data_ptr() and address.nbytes == 24 * x.element_size()
        """
        ctx = self.ctx
        ctx.check_symmetric(tensor, "HeapProvider.symmetric_address_map")
        offset = ctx.heap.offset_of(tensor)
        bases = [b + offset if direct else b for b, direct in zip(ctx.heap.bases, ctx.direct)]
        return address_map(bases, ctx.cur_rank, _nbytes(tensor), ctx.get_device(),
                           "HeapProvider.symmetric_address_map", owner=tensor, shape=tensor.shape)


class TorchSymmMemProvider:
    """PyTorch's symmetric memory (``torch.distributed._symmetric_memory``) as a provider: ``symm_mem.empty`` then
    ``rendezvous`` over ``group`` (default: the world), whose handle's ``buffer_ptrs`` give the table. Needs CUDA
    (torch's symmetric memory has no CPU backend) and one GPU per rank (torch refuses two ranks on one GPU).
    Multicast is neither needed nor used (``TORCH_SYMM_MEM_DISABLE_MULTICAST=1`` is fine).

    Example::

        # not run by the tests: torch's symmetric memory needs one GPU per rank
        provider = iris.TorchSymmMemProvider()  # the world, on the current GPU
        x, peer_bases = provider.allocate_symmetric(1024, dtype=torch.float32)
        x.fill_(1.0)
        ctx.ccl.all_reduce(x, x)  # the collectives take its tensors as they take the heap's
    """

    def __init__(self, group: dist.ProcessGroup | None = None, device: Device | None = None) -> None:
        self.group = dist.group.WORLD if group is None else group
        self.device = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)

    def allocate_symmetric_map(self, *size: int | Sequence[int],
                               dtype: torch.dtype | None = None) -> tuple[torch.Tensor, SymmetricAddressMap]:
        """Collective over the group. A tensor from ``symm_mem.empty`` and its ``SymmetricAddressMap``. Raises
        ``symmetric_address_map``'s errors.

        Example::

            # not run by the tests: torch's symmetric memory needs one GPU per rank
            x, address = iris.TorchSymmMemProvider().allocate_symmetric_map(4, 256, dtype=torch.bfloat16)
            assert address.bases[address.local_rank] == x.data_ptr()
        """
        from torch.distributed import _symmetric_memory as symm_mem

        tensor = symm_mem.empty(*size, dtype=dtype or torch.get_default_dtype(), device=self.device)
        return tensor, self.symmetric_address_map(tensor)

    def allocate_symmetric(self, *size: int | Sequence[int],
                           dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Collective over the group. A tensor from ``symm_mem.empty`` and its ``peer_bases``. Raises
        ``symmetric_address_map``'s errors.

        Example::

            # not run by the tests: torch's symmetric memory needs one GPU per rank
            x, peer_bases = iris.TorchSymmMemProvider().allocate_symmetric(1024)
            assert int(peer_bases[dist.get_rank()]) == x.data_ptr()
        """
        tensor, address = self.allocate_symmetric_map(*size, dtype=dtype)
        return tensor, address.peer_bases

    def symmetric_address_map(self, tensor: torch.Tensor) -> SymmetricAddressMap:
        """Collective over the group (torch's ``rendezvous``). The map of ``tensor``, which must come from
        ``symm_mem.empty`` (a view of one too): entry r is ``buffer_ptrs[r]`` moved by the tensor's offset in its
        buffer, the same on every rank.

        Raises ``ValueError`` when torch refuses the tensor (not from ``symm_mem.empty``), and on every rank when any
        rank's table is refused: distances between the ranks' addresses that are not multiples of 256 bytes
        (``BASE_ALIGNMENT``), or a live map of these bytes with another table.

        Example::

            # not run by the tests: torch's symmetric memory needs one GPU per rank
            from torch.distributed import _symmetric_memory as symm_mem

            x = symm_mem.empty(1024, dtype=torch.float32, device=ctx.get_device())
            address = iris.TorchSymmMemProvider().symmetric_address_map(x)
            assert address.bases[address.local_rank] == x.data_ptr()
        """
        from torch.distributed import _symmetric_memory as symm_mem

        caller = "TorchSymmMemProvider.symmetric_address_map"
        try:
            handle = symm_mem.rendezvous(tensor, self.group)
        except Exception as e:  # torch's own words, with where they came from
            raise ValueError(f"{caller}: torch's symmetric memory refused the tensor ({e}); make it with "
                             "torch.distributed._symmetric_memory.empty(...) on every rank of the group") from e
        ptrs = list(handle.buffer_ptrs)
        offset = tensor.data_ptr() - ptrs[handle.rank]
        bases = tuple(p + offset for p in ptrs)
        _agreed(_table_problem(bases, handle.rank, _nbytes(tensor)), caller, self.group)
        return address_map(bases, handle.rank, _nbytes(tensor), tensor.device, caller, owner=(tensor, handle),
                           shape=tensor.shape)


def wrap_symmetric(tensor: torch.Tensor, peer_addresses: Sequence[int] | torch.Tensor,
                   group: dist.ProcessGroup | None = None) -> SymmetricAddressMap:
    """Collective over ``group`` (default: the world). The ``SymmetricAddressMap`` of ``tensor``, whose counterpart
    on group rank r sits at ``peer_addresses[r]`` in this process (entry ``rank`` must be ``tensor.data_ptr()``).
    Checked: the list's length, the local entry, the same shape and dtype on every rank, the alignment of the
    distances, on GPUs that every address is mapped memory, and that no live map of these bytes has another table
    (``_claim``); every rank raises when any rank's check fails. The map holds ``tensor``; the caller keeps the
    peers' memory mapped while a kernel may use the map.

    Raises ``ValueError``, on every rank, naming each rank whose check failed.

    Example::

        from iris.copy_engine import peer_address

        x = ctx.zeros(256)  # here the heap's memory; in practice NVSHMEM's, an NCCL window's, opened IPC handles
        peers = [peer_address(ctx, x, r) for r in range(world_size)]
        address = iris.wrap_symmetric(x, peers)
        assert address.peer_address(x, (rank + 1) % world_size) == peers[(rank + 1) % world_size]
    """
    caller = "iris.wrap_symmetric"
    rank, world = dist.get_rank(group), dist.get_world_size(group)
    problem = _wrap_problem(tensor, peer_addresses, rank, world)
    shapes = all_gather_object((problem, tuple(tensor.shape), str(tensor.dtype)), group=group)
    problems = [f"rank {r}: {p}" for r, (p, _, _) in enumerate(shapes) if p]
    if problems:
        raise ValueError(f"{caller}: " + "; ".join(problems))
    if len({(s, d) for _, s, d in shapes}) != 1:
        listed = ", ".join(f"rank {r}: {tuple(s)} {d}" for r, (_, s, d) in enumerate(shapes))
        raise ValueError(f"{caller}: the tensor differs across the ranks ({listed}); a symmetric tensor has one shape "
                         "and dtype everywhere")
    return address_map(peer_addresses, rank, _nbytes(tensor), tensor.device, caller, owner=tensor,
                       shape=tensor.shape)


def _wrap_problem(tensor, peer_addresses, rank, world):
    """What is wrong with this rank's arguments to ``wrap_symmetric``, or None."""
    if not isinstance(tensor, torch.Tensor) or not tensor.is_contiguous():
        return "tensor must be a contiguous torch.Tensor"
    addresses = list(peer_addresses.tolist() if isinstance(peer_addresses, torch.Tensor) else peer_addresses)
    if len(addresses) != world:
        return f"peer_addresses has {len(addresses)} entries, the group {world} ranks; give one address a rank"
    if addresses[rank] != tensor.data_ptr():
        return (f"peer_addresses[{rank}] = {addresses[rank]:#x} is not the tensor's own address "
                f"{tensor.data_ptr():#x}; entry r is the address of rank r's counterpart in this process")
    odd = _misaligned(addresses, rank)
    if odd:
        return (f"the addresses of rank(s) {odd} do not lie a multiple of {BASE_ALIGNMENT.value} bytes from this "
                f"rank's, which iris's translation needs (it keeps accesses vectorised); align the allocations")
    stale = _claim(tuple(int(a) for a in addresses), rank, _nbytes(tensor))[1]
    if stale:
        return stale
    if tensor.device.type == "cuda":
        from iris.platform import cuda_driver

        unmapped = [r for r, address in enumerate(addresses) if not cuda_driver.is_device_pointer(address)]
        if unmapped:
            return (f"the addresses of rank(s) {unmapped} are not device memory mapped in this process; open the "
                    "peers' IPC handles (or map their memory) before wrapping")
    return None
