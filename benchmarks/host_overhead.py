"""Host time per eager call: what a training loop or a server pays on the CPU for each collective and heap
allocation, beside the anchors in the same run.

    python benchmarks/host_overhead.py --out results/1xH200/host_overhead --world-size 1
    python benchmarks/host_overhead.py --out /tmp/host --quick                 # the cpu backend

For each call three figures, in microseconds (``ms_*`` columns hold milliseconds, as everywhere):
  - ``return``: the time for the call to return to Python (p20/p50/p80 over ``--count`` calls, with the device
    drained every 64 calls so that a full launch queue never blocks the host);
  - ``back_to_back``: ``--count`` calls issued in a loop, then one synchronisation, divided by the count: the
    rate of an eager loop, bound by the host or by the GPU, whichever is slower;
  - ``profile``: torch.profiler over 200 back-to-back calls of the small all_reduces: the GPU's kernel time per
    call beside the host's issue time per call; the GPU is the bottleneck when the first is larger.
Calls: all_reduce at 8 KiB bf16 (iris ``ctx.ccl``, NCCL through torch.distributed, torch symmetric memory's
one-shot all-reduce), all_gather and reduce_scatter at 8 KiB per rank, all_reduce_rmsnorm at 8 x 4096 bf16
(against NCCL's all_reduce then torch's rms_norm), the ``"iris"`` torch.distributed backend's all_reduce and
``torch.ops.iris.all_reduce`` at 8 KiB (against NCCL's ``dist.all_reduce``), ``ctx.empty`` at 1 KiB / 64 KiB / 1 MiB
/ 64 MiB against ``torch.empty`` (and its pieces alone: the storage slice, the weak reference, the capture query,
the tensor by ``Tensor.new`` or torch's direct CUDA constructor), a copy-engine ``ctx.put`` of 4 KiB against ``Tensor.copy_`` of the same bytes into
the peer's heap, one ``put_tiles`` of 64 tiles of 64 KiB against 64 bare ``cuMemcpy2DAsync`` calls (the driver's
own cost of the tiles one by one; per call, divide by 64 for a tile), ``ops.matmul_all_gather`` 4096^3 bf16 eager
and replayed from a CUDA graph against cuBLAS's matmul of the same flops, and the "launch floor": a kernel that does
nothing, with the one-shot all_reduce's parameters (two tensors, the size, the group's sync tuple, five constexprs),
launched the way a remembered launch is (``iris/host/launches.py``: Triton's compiled launcher called directly) and
through ``kernel[grid]`` (Triton's ``JITFunction.run``). What a collective costs above the first row is ours.
World size 1 is where host time does not depend on peers (the targets are stated there); the put's peer is then the
rank itself. The context has its copy engines on (``engines=("ce",)``), whose proxy thread polls every 100 us when
idle.
"""

import argparse
import statistics
import time
import weakref

import torch
import torch.distributed as dist

import iris  # first: on the cpu backend it sets TRITON_INTERPRET, which triton reads at its import
import triton  # noqa: I001
import triton.language as tl
import iris.compile as iris_compile
import iris.distributed as iris_distributed
from iris.bench import report
from iris.ccl import common
from iris.copy_engine import Tile, peer_address
from iris.host import launches
from iris.host.distributed import all_gather_object
from iris.host.memory.peers import peer_view
from iris.platform import capture, cuda_driver, private

DRAIN_EVERY = 64
PROFILED_CALLS = 200


def _sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _return_times(fn, count, dev):
    """Seconds each call took to return, with the device drained every DRAIN_EVERY calls (outside the timing)."""
    times = []
    for i in range(count):
        if i % DRAIN_EVERY == 0:
            _sync(dev)
        began = time.perf_counter()
        fn()
        times.append(time.perf_counter() - began)
    _sync(dev)
    return sorted(times)


def _back_to_back(fn, count, dev):
    _sync(dev)
    began = time.perf_counter()
    for _ in range(count):
        fn()
    _sync(dev)
    return (time.perf_counter() - began) / count


def _profile(fn, dev, calls):
    """(kernel seconds per call on the GPU, host seconds per call) over ``calls`` back-to-back calls."""
    from torch.profiler import ProfilerActivity, profile

    _sync(dev)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    with profile(activities=activities) as prof:
        began = time.perf_counter()
        for _ in range(calls):
            fn()
        issued = time.perf_counter() - began
        _sync(dev)
    # microseconds; a kernel's own event carries its device time as self time, the CPU ops above it none
    kernel_us = sum(e.self_device_time_total for e in prof.key_averages()) if dev.type == "cuda" else 0.0
    return kernel_us * 1e-6 / calls, issued / calls


def _calls(ctx, nccl, iris_group, quick):
    """name -> {provider: fn or the reason it cannot run}."""
    import torch.nn.functional as F

    dev = ctx.get_device()
    world, rank = ctx.get_num_ranks(), ctx.get_rank()
    anchor = dist.get_backend(nccl)  # "nccl" on GPUs, "gloo" on the cpu backend
    n = 4096  # 8 KiB of bf16
    dtype = torch.bfloat16
    calls = {}

    inp, out = ctx.empty(n, dtype=dtype).normal_(), ctx.empty(n, dtype=dtype)
    plain = torch.randn(n, dtype=dtype, device=dev)
    symmetric = _symmetric(n, dtype, dev)
    calls["launch floor"] = _launch_floor(ctx, out, inp)
    calls["all_reduce 8 KiB"] = {
        "iris": lambda: ctx.ccl.all_reduce(out, inp),
        anchor: lambda: dist.all_reduce(plain, group=nccl),
        "symm_mem one_shot": symmetric,
    }
    gathered, gathered_plain = ctx.empty(world * n, dtype=dtype), torch.empty(world * n, dtype=dtype, device=dev)
    calls["all_gather 8 KiB/rank"] = {
        "iris": lambda: ctx.ccl.all_gather(gathered, inp),
        anchor: lambda: dist.all_gather_into_tensor(gathered_plain, plain, group=nccl),
    }
    full, full_plain = ctx.empty(world * n, dtype=dtype).normal_(), torch.randn(world * n, dtype=dtype, device=dev)
    piece = torch.empty(n, dtype=dtype, device=dev)
    calls["reduce_scatter 8 KiB/rank"] = {
        "iris": lambda: ctx.ccl.reduce_scatter(piece, full),
        anchor: lambda: dist.reduce_scatter_tensor(piece, full_plain, group=nccl),
    }
    tokens, hidden = (2, 64) if quick else (8, 4096)
    x = ctx.empty(tokens, hidden, dtype=dtype).normal_()
    x_plain = torch.randn(tokens, hidden, dtype=dtype, device=dev)
    residual = torch.randn_like(x_plain)
    weight = torch.ones(hidden, dtype=dtype, device=dev)
    normed, residual_out = torch.empty_like(x_plain), torch.empty_like(x_plain)

    def nccl_then_norm():
        dist.all_reduce(x_plain, group=nccl)
        F.rms_norm(x_plain + residual, (hidden,), weight, 1e-6)

    calls[f"all_reduce_rmsnorm {tokens}x{hidden}"] = {
        "iris": lambda: ctx.ccl.all_reduce_rmsnorm(normed, residual_out, x, residual, weight),
        f"{anchor} + rms_norm": nccl_then_norm,
    }
    backend_t = torch.randn(n, dtype=dtype, device=dev)
    calls["torch.distributed all_reduce 8 KiB"] = {
        "iris backend": lambda: dist.all_reduce(backend_t, group=iris_group),
        "torch.ops.iris": lambda: torch.ops.iris.all_reduce(backend_t),
        anchor: lambda: dist.all_reduce(plain, group=nccl),
    }
    for nbytes in (1 << 10, 64 << 10, 1 << 20, 64 << 20):
        calls[f"empty {report.format_bytes(nbytes)}"] = {
            "iris": lambda nbytes=nbytes: ctx.empty(nbytes, dtype=torch.uint8),
            "torch.empty": lambda nbytes=nbytes: torch.empty(nbytes, dtype=torch.uint8, device=dev),
        }
    calls["empty 1 KiB, its pieces"] = _empty_pieces(dev)
    peer = (rank + 1) % world
    src, dst = ctx.empty(4096, dtype=torch.uint8).random_(0, 255), ctx.empty(4096, dtype=torch.uint8)
    theirs = peer_view(ctx, dst, peer)
    calls["copy-engine put 4 KiB"] = {
        "iris ctx.put": lambda: ctx.put(src, peer, dst, async_op=True),
        "Tensor.copy_": lambda: theirs.copy_(src),
    }
    calls[f"put_tiles {TILES} x 64 KiB (per call)"] = _tiles(ctx, peer)
    calls.update(_fused(ctx, quick))
    return calls


def _empty_pieces(dev):
    """What ``ctx.empty`` does per call (``SymmetricHeap.allocate_tensor``), each alone: the storage slice, the
    weak reference, the capture query, and the tensor made over the slice by ``Tensor.new`` (then the view to the
    shape) or by torch's direct CUDA constructor."""
    base = torch.empty(1 << 20, dtype=torch.uint8, device=dev).untyped_storage()
    piece, template = base[4096:5120], torch.empty(0, dtype=torch.uint8, device=dev)
    construct = private.cuda_tensor_constructor()
    meta = {"size": (32, 32), "stride": (32, 1), "storage_offset": 0, "dtype": torch.uint8}
    return {
        "storage slice": lambda: base[4096:5120],
        "weak reference": lambda: weakref.ref(piece, _ignore),
        "capture query": lambda: capture.current(dev),
        "Tensor.new + view": lambda: template.new(piece).view(32, 32),
        "CUDA constructor": (lambda: construct(meta, piece)) if construct is not None and dev.type == "cuda"
        else "no CUDA constructor here",
    }


def _ignore(_):
    pass


def _fused(ctx, quick):
    """matmul_all_gather's fused kernel on the SMs, eager (a remembered launch from the third call) and replayed from
    a CUDA graph, beside cuBLAS's matmul of this rank's block (the same flops)."""
    from iris.ops import OpsConfig

    dev, world = ctx.get_device(), ctx.get_num_ranks()
    size = 64 if quick else 4096
    tiles = dict(block_m=32, block_n=32, block_k=32) if quick else {}
    config = OpsConfig(variant="fused", copy_engine=False, **tiles)
    a = torch.randn(size, size, dtype=torch.bfloat16, device=dev)
    b = torch.randn(size, size // world, dtype=torch.bfloat16, device=dev)
    out, local = ctx.empty(size, size, dtype=torch.bfloat16), torch.empty(size, size // world, dtype=torch.bfloat16,
                                                                          device=dev)

    def eager():
        ctx.ops.matmul_all_gather(out, a, b, config=config)

    return {f"matmul_all_gather {size}^3 bf16": {
        "iris eager": eager,
        "iris graphed": _graphed(eager, dev),
        "cuBLAS matmul": lambda: torch.matmul(a, b, out=local),
    }}


def _graphed(fn, dev):
    """``fn`` captured into a CUDA graph (after two eager calls), as its replay; a reason on the cpu backend."""
    if dev.type != "cuda":
        return "CUDA graphs need a GPU"
    fn()
    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


TILES, TILE = 64, 128  # put_tiles' row: 64 tiles of 128 x 128 fp32 (64 KiB each) of a 1024 x 1024 matrix


def _tile_matrices(ctx):
    grid = int(TILES ** 0.5) * TILE
    return ctx.empty(grid, grid, dtype=torch.float32).normal_(), ctx.zeros(grid, grid, dtype=torch.float32)


def _tiles(ctx, peer):
    """One ``put_tiles`` of the 64 tiles, and the driver's own 64 ``cuMemcpy2DAsync`` of the same tiles on the same
    lane (no Python of ours around them)."""
    a, b = _tile_matrices(ctx)
    pitch, side = a.stride(0) * a.element_size(), a.shape[0] // TILE
    tiles = [Tile(m, n, TILE, TILE, a.element_size(), pitch, a.data_ptr()) for m in range(side) for n in range(side)]
    target = peer_address(ctx, b, peer)
    targets, pitches = [target] * TILES, [pitch] * TILES
    providers = {"iris put_tiles": lambda: ctx.put_tiles(tiles, peer, targets, pitches, async_op=True)}
    if ctx.get_device().type != "cuda":
        providers["64 x cuMemcpy2DAsync"] = "n/a: the driver call needs CUDA"
        return providers
    handle, width = ctx.copy_engines.lanes[(peer, 0)].handle, TILE * a.element_size()
    starts = [(m * TILE * pitch + n * width) for m in range(side) for n in range(side)]

    def driver():
        for start in starts:
            cuda_driver.copy_2d(target + start, pitch, a.data_ptr() + start, pitch, width, TILE, handle)

    providers["64 x cuMemcpy2DAsync"] = driver
    return providers


@triton.jit
def _nothing_kernel(out, inp, n, sync, GROUP_SIZE: tl.constexpr, OP: tl.constexpr, ACC_FP32: tl.constexpr,
                    HINT: tl.constexpr, BLOCK: tl.constexpr):
    pass  # the one-shot all_reduce's parameters, no work: the launch alone


def _launch_floor(ctx, out, inp):
    """The launch floor's two providers: a remembered ``Launch`` of a kernel that does nothing (the direct launch
    after its first call) and the same kernel through ``kernel[grid]``."""
    p = common.plan(ctx, "host_overhead.launch_floor", inp.numel(), None, None)
    fp = common.fingerprint(ctx, "host_overhead.launch_floor", (out, inp), "sum", "one_shot")
    static = (inp.numel(), p.sync.args(ctx, fp))
    meta = dict(GROUP_SIZE=p.sync.size, OP="sum", ACC_FP32=True, HINT=16, BLOCK=p.block, num_warps=p.warps)
    launch = launches.Launch(_nothing_kernel, p.grid, static, meta)
    return {"Launch (direct)": lambda: launch(out, inp),
            "kernel[grid]": lambda: _nothing_kernel[p.grid](out, inp, *static, **meta)}


def _symmetric(n, dtype, dev):
    """torch symmetric memory's one-shot all-reduce on a rendezvoused buffer, or why it cannot run here."""
    if dev.type != "cuda":
        return "n/a: symmetric memory needs CUDA"
    try:
        import torch.distributed._symmetric_memory as symm_mem

        t = symm_mem.empty(n, dtype=dtype, device=dev).normal_()
        name = dist.group.WORLD.group_name
        symm_mem.rendezvous(t, name)
        torch.ops.symm_mem.one_shot_all_reduce(t, "sum", name)
    except Exception as e:  # noqa: BLE001 - reported in the table
        return f"n/a: {type(e).__name__}: {e}"[:160]
    return lambda: torch.ops.symm_mem.one_shot_all_reduce(t, "sum", name)


def _check(ctx, nccl):
    """After the timed calls (remembered launches by then): iris's all_reduce and reduce_scatter against NCCL's on
    the same inputs, element by element."""
    dev, world = ctx.get_device(), ctx.get_num_ranks()
    torch.manual_seed(1234 + ctx.get_rank())
    inp, out = ctx.empty(4096, dtype=torch.float32).normal_(), ctx.empty(4096, dtype=torch.float32).fill_(float("nan"))
    ref = inp.clone()
    for _ in range(2):
        ctx.ccl.all_reduce(out, inp)
    dist.all_reduce(ref, group=nccl)
    piece, ref_piece = torch.full((4096 // world,), float("nan"), device=dev), torch.empty(4096 // world, device=dev)
    ctx.ccl.reduce_scatter(piece, inp)
    dist.reduce_scatter_tensor(ref_piece, inp.clone(), group=nccl)
    good = torch.allclose(out, ref, rtol=1e-5, atol=1e-5) and torch.allclose(piece, ref_piece, rtol=1e-5, atol=1e-5)
    puts = _check_puts(ctx)
    if not good or puts.startswith("WRONG"):
        return "WRONG: iris and NCCL differ" if not good else puts
    return f"ok (all_reduce and reduce_scatter match NCCL; {ctx.launches.hits} cached launches; {puts})"


def _check_puts(ctx):
    """A put and a put_tiles landed byte for byte (at world size 1 the peer is this rank: its own heap shows it)."""
    if ctx.get_num_ranks() != 1:
        return "puts not checked across ranks"
    src, dst = ctx.empty(4096, dtype=torch.uint8).random_(1, 255), ctx.zeros(4096, dtype=torch.uint8)
    ctx.put(src, 0, dst)
    a, b = _tile_matrices(ctx)
    pitch, side = a.stride(0) * a.element_size(), a.shape[0] // TILE
    tiles = [Tile(m, n, TILE, TILE, a.element_size(), pitch, a.data_ptr()) for m in range(side) for n in range(side)]
    ctx.put_tiles(tiles, 0, [peer_address(ctx, b, 0)] * TILES, [pitch] * TILES)
    return "put and put_tiles landed" if torch.equal(src, dst) and torch.equal(a, b) else "WRONG: a put differs"


def _row(ctx, env, op, provider, variant, seconds):
    """One result row (the harness's schema) from sorted per-call seconds (or one figure)."""
    seconds = seconds if isinstance(seconds, list) else [seconds]
    q = lambda f: seconds[min(len(seconds) - 1, int(f * len(seconds)))] * 1e3  # noqa: E731
    return {"op": op, "provider": provider, "variant": variant, "world_size": ctx.get_num_ranks(),
            "dtype": "uint8" if op.startswith(("empty", "copy-engine")) else "float32" if op.startswith("put_tiles")
            else "bfloat16", "shape": "", "bytes": 0,
            "ms_p20": q(0.2), "ms_p50": q(0.5), "ms_p80": q(0.8), "timing": f"host {variant}",
            "gpu": env["gpu"], "commit": env["commit"], "date": env["date"]}


def main(out, count, quick):
    ctx = iris.iris(heap_size=1 << 30 if not quick else 1 << 27, engines=("ce",))
    dev = ctx.get_device()
    env = report.environment(dev)
    iris_compile.set_context(ctx)
    iris_distributed.set_context(ctx)
    iris_group = dist.new_group(backend="iris")
    nccl = dist.group.WORLD  # NCCL on GPUs, gloo on the cpu backend (iris.iris initialised it)
    rows, table, skipped = [], [], []
    for op, providers in _calls(ctx, nccl, iris_group, quick).items():
        for provider, fn in providers.items():
            if isinstance(fn, str):
                skipped.append(f"{op} {provider}: {fn}")
                continue
            for _ in range(3):  # compile, make the group flags, warm the caches
                fn()
            _sync(dev)
            returns = _return_times(fn, count, dev)
            loop = _back_to_back(fn, count, dev)
            rows += [_row(ctx, env, op, provider, "return", returns),
                     _row(ctx, env, op, provider, "back_to_back", loop)]
            cells = [op, provider, statistics.median(returns) * 1e6, loop * 1e6]
            if not op.startswith("empty"):  # allocation queues no GPU work
                kernel, issue = _profile(fn, dev, min(count, PROFILED_CALLS))
                rows += [_row(ctx, env, op, provider, "profile_kernel", kernel),
                         _row(ctx, env, op, provider, "profile_issue", issue)]
                cells += [kernel * 1e6, issue * 1e6]
            table.append(cells)
    skipped.append(f"check: {_check(ctx, nccl)}")
    everyone = all_gather_object(table)
    if ctx.get_rank() != 0:
        return None
    report.write_results(rows, out, "host_overhead")
    print(f"{ctx.get_num_ranks()} rank(s), {ctx.backend} backend, {env['gpu']}; us per call (rank 0; median over "
          f"{count} calls for 'return')")
    print(f"{'call':<38} {'provider':<18} {'return':>8} {'b2b':>8} {'kernel':>8} {'issue':>8}  bottleneck")
    for cells in everyone[0]:
        op, provider, ret, loop = cells[:4]
        extra = f"{cells[4]:>8.2f} {cells[5]:>8.2f}  {'GPU' if cells[4] >= cells[5] else 'host'}" if len(cells) > 4 \
            else ""
        print(f"{op:<38} {provider:<18} {ret:>8.2f} {loop:>8.2f} {extra}")
    for line in skipped:
        print(line)
    return everyone[0]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True)
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--world-size", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="few calls, small shapes (the cpu backend)")
    args = parser.parse_args()
    iris.run(main, args.world_size, args.out, 8 if args.quick else args.count, args.quick)
