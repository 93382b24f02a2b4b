"""Host API: tensor creation on the heap, symmetry, broadcast, identity, logging, bad input."""

import io
import logging
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import torch

import iris
from conftest import world_sizes
from rank_utils import error_message, new_context


def _creation_body():
    ctx = new_context()
    rank = ctx.get_rank()
    torch.manual_seed(rank)
    made = {
        "zeros": ctx.zeros(3, 5), "ones": ctx.ones((2, 3), dtype=torch.int32), "empty": ctx.empty(7, dtype=torch.int8),
        "full": ctx.full((4,), 2.5), "full_int": ctx.full((2, 2), 7), "zeros_like": ctx.zeros_like(torch.ones(2, 9)),
        "randn": ctx.randn(64, 64, dtype=torch.bfloat16), "rand": ctx.rand(100), "uniform": ctx.uniform(50, 2.0, 3.0),
        "randint": ctx.randint(5, 10, (100,)), "randint_high": ctx.randint(4, (10,)), "arange": ctx.arange(10),
        "arange_f": ctx.arange(0.0, 1.0, 0.25), "linspace": ctx.linspace(0, 1, 5),
        "sym": ctx.as_symmetric(torch.arange(6.0)),
        "empty_like": ctx.empty_like(torch.ones(3, 4, dtype=torch.int16)),
        "ones_like": ctx.ones_like(torch.zeros(2, 5), dtype=torch.float64),
        "full_like": ctx.full_like(torch.zeros(4, dtype=torch.int32), 9),
        "rand_like": ctx.rand_like(torch.zeros(200)), "randn_like": ctx.randn_like(torch.zeros(20, 20)),
        "like_channels_last": ctx.ones_like(torch.zeros(2, 3, 4, 5).to(memory_format=torch.channels_last)),
    }
    checks = {
        "zeros": made["zeros"].shape == (3, 5) and made["zeros"].dtype == torch.float32 and not made["zeros"].any(),
        "ones": bool((made["ones"] == 1).all()) and made["ones"].dtype == torch.int32,
        "empty": made["empty"].shape == (7,) and made["empty"].dtype == torch.int8,
        "full": bool((made["full"] == 2.5).all()),
        "full_int": made["full_int"].dtype == torch.int64 and bool((made["full_int"] == 7).all()),
        "zeros_like": made["zeros_like"].shape == (2, 9) and not made["zeros_like"].any(),
        "randn": made["randn"].dtype == torch.bfloat16 and 0.5 < float(made["randn"].float().std()) < 1.5,
        "rand": bool(((made["rand"] >= 0) & (made["rand"] < 1)).all()) and made["rand"].std() > 0,
        "uniform": bool(((made["uniform"] >= 2) & (made["uniform"] < 3)).all()),
        "randint": bool(((made["randint"] >= 5) & (made["randint"] < 10)).all()),
        "randint_high": bool(((made["randint_high"] >= 0) & (made["randint_high"] < 4)).all()),
        "arange": torch.equal(made["arange"].cpu(), torch.arange(10)),
        "arange_f": torch.equal(made["arange_f"].cpu(), torch.arange(0.0, 1.0, 0.25)),
        "linspace": torch.allclose(made["linspace"].cpu(), torch.linspace(0, 1, 5)),
        "sym": torch.equal(made["sym"].cpu(), torch.arange(6.0)),
        "empty_like": made["empty_like"].shape == (3, 4) and made["empty_like"].dtype == torch.int16,
        "ones_like": made["ones_like"].dtype == torch.float64 and bool((made["ones_like"] == 1).all()),
        "full_like": made["full_like"].dtype == torch.int32 and bool((made["full_like"] == 9).all()),
        "rand_like": bool(((made["rand_like"] >= 0) & (made["rand_like"] < 1)).all()) and made["rand_like"].std() > 0,
        "randn_like": made["randn_like"].shape == (20, 20) and 0.5 < float(made["randn_like"].std()) < 1.5,
        "like_channels_last": made["like_channels_last"].is_contiguous(memory_format=torch.channels_last),
    }
    symmetric = all(ctx.is_symmetric(t) for t in made.values())
    offsets = [ctx.heap.offset_of(t) for t in made.values()]
    aligned = all(o % 256 == 0 for o in offsets)
    return checks, symmetric, offsets, aligned, ctx.is_symmetric(torch.zeros(3, device=ctx.get_device()))


@pytest.mark.parametrize("world_size", world_sizes())
def test_tensor_creation_is_symmetric(pools, world_size):
    results = pools(world_size).run(_creation_body)
    for rank, (checks, symmetric, offsets, aligned, foreign) in enumerate(results):
        assert all(checks.values()), f"rank {rank}: {[k for k, ok in checks.items() if not ok]}"
        assert symmetric and aligned and not foreign
        assert offsets == results[0][2], "allocations landed at different offsets on different ranks"


def _random_body():
    """Every rank seeds torch differently; the context's random factories still agree, and a rank's own generator
    gives that rank's stream."""
    import torch.distributed as dist

    rank = dist.get_rank()
    torch.manual_seed(1000 + 7 * rank)
    ctx = new_context()
    device = ctx.get_device()
    shared = {"randn": ctx.randn(33, 5, dtype=torch.float32), "rand": ctx.rand(101),
              "uniform": ctx.uniform(40, -2.0, 3.0), "randint": ctx.randint(-50, 50, (77,), dtype=torch.int32)}
    own_seed = 5 + rank
    own = ctx.randn(64, generator=torch.Generator(device).manual_seed(own_seed))
    expected_own = torch.randn(64, generator=torch.Generator(device).manual_seed(own_seed), device=device)
    shared["after_own"] = ctx.rand(50)  # the caller's generator left the shared stream where it was
    shared = {k: v.cpu().clone() for k, v in shared.items()}
    own, own_is_torchs = own.cpu().clone(), torch.equal(own, expected_own)
    ctx.close()
    torch.manual_seed(42 + rank)  # rank 0's seed decides, whatever the others say
    again = new_context()
    first = again.randn(16)
    expected_first = torch.empty(16, device=device).normal_(generator=torch.Generator(device).manual_seed(42))
    return shared, own, own_is_torchs, torch.equal(first, expected_first)


@pytest.mark.parametrize("world_size", [2, 3])
def test_random_factories_agree_across_ranks(pools, world_size):
    results = pools(world_size).run(_random_body)
    shared0 = results[0][0]
    assert shared0["randn"].std() > 0.5 and len(shared0["randint"].unique()) > 10  # random, not constant
    for rank, (shared, own, own_is_torchs, reproducible) in enumerate(results):
        for name, values in shared.items():
            assert torch.equal(values, shared0[name]), f"rank {rank}: ctx.{name} differs from rank 0's"
        assert own_is_torchs, f"rank {rank}: generator= did not give the caller's own stream"
        assert rank == 0 or not torch.equal(own, results[0][1]), "ranks' own generators gave the same values"
        assert reproducible, f"rank {rank}: torch.manual_seed(42) before iris.iris() did not fix the shared stream"


def _identity_body():
    ctx = new_context()
    tensor, peer_bases = ctx.allocate_symmetric(16, dtype=torch.float32)
    bases = ctx.get_heap_bases().cpu().tolist()
    context = ctx.get_device_context().cpu().tolist()
    return {
        "rank": ctx.get_rank(), "world": ctx.get_num_ranks(), "cu": ctx.get_cu_count(), "device": str(ctx.get_device()),
        "device_id": ctx.get_device_id(), "bases": bases, "context": context,
        "peer_bases": peer_bases.cpu().tolist(), "ptr": tensor.data_ptr(),
        "offset": tensor.data_ptr() - bases[ctx.get_rank()],
        "copy_engine": ctx.get_copy_engine_ctx(), "shares_gpu": ctx.shares_gpu,
        "gpus": torch.cuda.device_count() if ctx.get_device().type == "cuda" else 0,
    }


@pytest.mark.parametrize("world_size", world_sizes())
def test_identity_and_tables(pools, world_size):
    results = pools(world_size).run(_identity_body)
    for rank, r in enumerate(results):
        assert r["rank"] == rank and r["world"] == world_size and r["cu"] >= 1
        assert len(r["bases"]) == world_size and len(set(r["bases"])) == world_size
        # upstream's layout: [rank, world, bases, 17 tracing words (off: zero)], then the bytes each base addresses
        assert r["context"][:2 + world_size] == [rank, world_size] + r["bases"]
        assert r["context"][2 + world_size:-1] == [0] * 17 and r["context"][-1] >= 1 << 22
        assert r["peer_bases"] == [b + r["offset"] for b in r["bases"]]
        assert r["peer_bases"][rank] == r["ptr"]
        assert r["offset"] == results[0]["offset"]
        assert r["copy_engine"] is None
        # ranks share a GPU exactly when there are more of them than GPUs (never on the cpu backend)
        assert r["shares_gpu"] == (r["gpus"] > 0 and world_size > r["gpus"]), (r["shares_gpu"], r["gpus"])


def _broadcast_body():
    ctx = new_context()
    rank = ctx.get_rank()
    src = ctx.get_num_ranks() - 1
    out = {
        "scalar": ctx.broadcast(42 if rank == 0 else None),
        "object": ctx.broadcast({"a": [1, 2], "b": "x"} if rank == src else None, src=src),
        "tensor": ctx.broadcast(torch.arange(6).reshape(2, 3) * 3 if rank == 0 else None),
        "bf16": ctx.broadcast(torch.full((4,), 1.5, dtype=torch.bfloat16) if rank == 0 else None).dtype.name,
        "numpy": ctx.broadcast(np.linspace(0, 1, 5) if rank == 0 else None),
        "empty": ctx.broadcast(torch.zeros(0, 3) if rank == 0 else None),
        # dtypes the process group's backend lacks travel as bytes
        "uint16": ctx.broadcast(torch.tensor([[65535, 7]], dtype=torch.uint16) if rank == 0 else None),
        "float8": ctx.broadcast(torch.tensor([448.0, -0.5], dtype=torch.float8_e4m3fn) if rank == 0 else None),
        "complex": ctx.broadcast(torch.tensor([1 + 2j], dtype=torch.complex64) if rank == 0 else None),
    }
    return {k: (v.tolist() if isinstance(v, np.ndarray) else v, type(v).__name__) for k, v in out.items()}


def test_broadcast_kinds(pools):
    for r in pools(3).run(_broadcast_body):
        assert r["scalar"] == (42, "int")
        assert r["object"] == ({"a": [1, 2], "b": "x"}, "dict")
        assert r["tensor"] == ([[0, 3, 6], [9, 12, 15]], "ndarray")
        assert r["numpy"] == (np.linspace(0, 1, 5).tolist(), "ndarray")
        assert r["empty"] == ([], "ndarray")
        assert r["bf16"] == ("float32", "str")
        assert r["uint16"] == ([[65535, 7]], "ndarray") and r["float8"] == ([448.0, -0.5], "ndarray")
        assert r["complex"] == ([1 + 2j], "ndarray")


def _logging_body():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(iris.logging.RankFormatter())
    iris.logging.logger.addHandler(handler)
    ctx = new_context()
    iris.set_logger_level(iris.DEBUG)
    ctx.debug("dbg")
    iris.set_logger_level(iris.WARNING)
    ctx.info("hidden")
    ctx.warning("warn")
    ctx.error("err")
    iris.logger.warning("own")  # a program's own record, not a context's: no rank to show
    iris.logging.logger.removeHandler(handler)
    iris.set_logger_level(iris.INFO)
    return stream.getvalue()


def test_logging_prefix_and_levels(pools):
    out = pools(2).run(_logging_body)
    for rank, text in enumerate(out):
        # upstream's newest format, "HH:MM:SS LEVEL [Iris] [rank/world] message", the clock cut off
        lines = [re.sub(r"^\d\d:\d\d:\d\d ", "", line) for line in text.strip().splitlines()]
        assert f"DEBUG [Iris] [{rank}/2] dbg" in lines and f"WARNING [Iris] [{rank}/2] warn" in lines
        assert f"ERROR [Iris] [{rank}/2] err" in lines and not any("hidden" in line for line in lines)
        assert "WARNING [Iris] [?/?] own" in lines  # iris.logger, upstream's name: no context, no rank
    from iris.logging import IrisFormatter, logger  # upstream Iris's module path

    assert logger is iris.logger and IrisFormatter is iris.logging.RankFormatter


def _bad_input_body():
    import torch.distributed as dist

    ctx = new_context(heap_size=1 << 16)
    left = ctx.heap.bytes_left
    first_only = dist.new_group([0])  # collective: every rank makes it, rank 1 gets the non-member marker
    return {
        "non_member": error_message(ctx.barrier, group=first_only) if ctx.get_rank() == 1 else None,
        "heap_full": error_message(ctx.zeros, 1 << 20, dtype=torch.float32),
        "left": left,
        "heap_size": error_message(iris.iris, heap_size=0),
        "heap_size_type": error_message(iris.iris, heap_size="big"),
        "allocator": error_message(iris.iris, heap_size=1 << 16, allocator_type="malloc"),
        "engine": error_message(iris.iris, heap_size=1 << 16, engines=("nvlink",)),
        "not_on_heap": error_message(ctx.check_symmetric, torch.zeros(4), "my_op", "inp"),
        "rank": error_message(ctx.check_rank, 5, "my_op", "peer"),
        "src": error_message(ctx.broadcast, 1, src=-1),
        "randn_int": error_message(ctx.randn, 4, dtype=torch.int32),
        "device": error_message(ctx.zeros, 4, device="meta"),
        "size": error_message(ctx.zeros, 2.5),
        "group": error_message(ctx.barrier, group=[0, 1]),  # ranks, where a ProcessGroup belongs
    }


def test_bad_input_errors(pools):
    r, second = pools(2).run(_bad_input_body)
    assert "Iris.barrier: rank 1 is not a member of the group" in second["non_member"]
    assert "MemoryError" in r["heap_full"] and "Iris.zeros" in r["heap_full"]
    assert "4194304 bytes" in r["heap_full"] and f"only {r['left']} bytes are left" in r["heap_full"]
    assert "heap_size" in r["heap_full"]  # says how to fix it
    assert "iris.iris: heap_size must be a positive" in r["heap_size"] and "0" in r["heap_size"]
    assert "iris.iris: heap_size" in r["heap_size_type"]
    assert "unknown allocator_type 'malloc'" in r["allocator"] and "'torch'" in r["allocator"]
    assert "iris.iris: unknown copy engine 'nvlink'" in r["engine"] and "'sdma'" in r["engine"]
    assert "my_op: inp is not on the symmetric heap" in r["not_on_heap"] and "ctx.zeros" in r["not_on_heap"]
    assert "my_op: peer=5 is outside [0, 2)" in r["rank"]
    assert "Iris.broadcast: src=-1 is outside" in r["src"]
    assert "Iris.randn: dtype torch.int32 is not a floating-point type" in r["randn_int"]
    assert "RuntimeError: Iris.zeros: device='meta'" in r["device"] and "device=None" in r["device"]
    assert "Iris.zeros: size must be integers" in r["size"]
    assert "Iris.barrier: group must be a torch.distributed ProcessGroup or None, got list" in r["group"]
    assert "new_group" in r["group"]


def _upstream_forms_body():
    """What upstream Iris's programs pass to the factories and read from the context."""
    ctx = new_context()
    dev = ctx.get_device()
    other = "meta" if dev.type == "cpu" else "cpu"
    out, checks = {}, {}
    for name, make, expect in [
        ("zeros", lambda o: ctx.zeros(2, 3, out=o), torch.zeros(2, 3)),
        ("ones", lambda o: ctx.ones((2, 3), out=o), torch.ones(2, 3)),
        ("full", lambda o: ctx.full((2, 3), 2.5, out=o), torch.full((2, 3), 2.5)),
        ("empty", lambda o: ctx.empty(2, 3, out=o), None),
        ("randn", lambda o: ctx.randn(2, 3, out=o), None),
        ("rand", lambda o: ctx.rand(2, 3, out=o), None),
        ("uniform", lambda o: ctx.uniform((2, 3), 4.0, 5.0, out=o), None),
        ("linspace", lambda o: ctx.linspace(0.0, 5.0, 6, out=o), torch.linspace(0.0, 5.0, 6)),
        ("arange", lambda o: ctx.arange(0.0, 6.0, out=o), torch.arange(0.0, 6.0)),
    ]:
        o = ctx.full((6,), -77.0)  # poisoned, on the heap
        t = make(o)
        checks[f"out/{name}"] = t.data_ptr() == o.data_ptr() and (expect is None or torch.equal(t.cpu(), expect))
    o = ctx.full((6,), -77, dtype=torch.int64)
    t = ctx.randint(3, 9, (2, 3), out=o)
    checks["out/randint"] = t.data_ptr() == o.data_ptr() and bool(((t >= 3) & (t < 9)).all())
    checks["arange_out_is_out"] = ctx.arange(6, out=o) is o and torch.equal(o.cpu(), torch.arange(6))
    out["out_numel"] = error_message(ctx.zeros, 3, 3, out=ctx.empty(4))
    out["out_dtype"] = error_message(ctx.zeros, 3, dtype=torch.float32, out=ctx.empty(3, dtype=torch.int32))
    out["out_foreign"] = error_message(ctx.ones, 3, out=torch.zeros(3, device=dev))
    checks["pin_memory"] = all(f(4, pin_memory=False).shape == (4,) and f(4, pin_memory=True).shape == (4,)
                               for f in (ctx.empty, ctx.rand, ctx.randn))
    last = ctx.empty(2, 3, 4, 5, memory_format=torch.channels_last)
    like = ctx.zeros_like(last)
    checks["memory_format"] = (last.is_contiguous(memory_format=torch.channels_last) and ctx.is_symmetric(last)
                               and like.stride() == last.stride() and not like.any()
                               and ctx.zeros_like(last, memory_format=torch.contiguous_format).is_contiguous())
    checks["nested_size"] = all(t.shape == (2, 3, 4) for t in (ctx.zeros(((2, 3, 4),)), ctx.rand(((2, 3, 4),)),
                                                                ctx.randint(5, ((2, 3, 4),)), ctx.empty([[2, 3, 4]])))
    checks["scalar"] = ctx.zeros(()).shape == () and ctx.zeros(()).item() == 0
    checks["steps"] = all(ctx.linspace(0, 1, s).shape == (5,) for s in ((5,), [5], ((5,),)))
    z = ctx.linspace(0.0 + 0.0j, 1.0 + 1.0j, 5)
    checks["complex"] = z.dtype == torch.complex64 and torch.equal(z.cpu(), torch.linspace(0j, 1 + 1j, 5))
    out["arange_empty"] = error_message(ctx.arange, 5, 1)
    out["arange_step"] = error_message(ctx.arange, 1, 5, 0)
    out["randint_arity"] = error_message(ctx.randint, 10)
    out["randint_many"] = error_message(ctx.randint, 0, 10, (2, 3), (4, 5))
    out["device"] = error_message(ctx.zeros, 3, device=other)
    checks["device_type_only"] = ctx.zeros(3, device=dev.type).device == dev  # "cuda": the rank's GPU
    checks["device_str"] = (isinstance(ctx.device, str) and ctx.device == str(dev) and
                            isinstance(ctx.get_device(), torch.device) and ctx.device.startswith(dev.type))
    checks["zeros_on_device_str"] = str(ctx.zeros(2, device=ctx.device).device) == ctx.device
    creation = iris.tensor_creation
    checks["module"] = (creation.parse_size(((2, 3),)) == ((2, 3), 6) and creation.parse_size(((),)) == ((), 1)
                        and creation.is_valid_device(None, dev) and not creation.is_valid_device(other, dev)
                        and torch.equal(creation.full(ctx.heap, dev, (2,), 3).cpu(), torch.tensor([3, 3]))
                        and creation.zeros(ctx.heap, dev, 4).shape == (4,)  # one int, as torch.zeros(4)
                        and ctx.is_symmetric(creation.zeros_like(ctx.heap, dev, last))
                        and creation.apply_layout(last, torch.strided) is last)
    out["layout"] = error_message(creation.apply_layout, last, torch.sparse_coo)
    checks["names"] = (iris.logger is logging.getLogger("iris") and iris.TraceEvent().put == 3
                       and iris.TraceEvent().barrier == 3073)
    return checks, out


def test_upstream_forms(pools):
    for checks, out in pools(2).run(_upstream_forms_body):
        assert all(checks.values()), [k for k, ok in checks.items() if not ok]
        assert "RuntimeError: Iris.zeros: The output tensor has 4 elements, but 9 are required" in out["out_numel"]
        assert "RuntimeError: Iris.zeros: The output tensor has dtype torch.int32, but torch.float32" in out["out_dtype"]
        assert "RuntimeError: Iris.ones: The output tensor is not on the symmetric heap" in out["out_foreign"]
        assert "ValueError: Iris.arange: the range [5, 1) is empty with step 1" in out["arange_empty"]
        assert "ValueError: Iris.arange: step must be non-zero" in out["arange_step"]
        assert "ValueError: Iris.randint" in out["randint_arity"] and "randint(low, high, size)" in out["randint_many"]
        assert "RuntimeError: Iris.zeros: device=" in out["device"]
        assert "ValueError: iris.tensor_creation: layout=torch.sparse_coo" in out["layout"]


def test_unknown_backend_is_refused():
    env = dict(os.environ, IRIS_BACKEND="tpu")
    proc = subprocess.run([sys.executable, "-c", "import iris"], env=env, capture_output=True, text=True)
    assert proc.returncode != 0
    assert "IRIS_BACKEND='tpu' is not a backend" in proc.stderr and "cpu" in proc.stderr


def test_iris_outside_a_launcher_says_how_to_start():
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    proc = subprocess.run([sys.executable, "-c", "import iris; iris.iris(1 << 20)"], env=env, capture_output=True,
                          text=True)
    assert proc.returncode != 0 and "torchrun" in proc.stderr and "RANK" in proc.stderr


def _mismatched_heap_body():
    import torch.distributed as dist

    try:
        iris.iris(heap_size=(1 << 16) * (1 + dist.get_rank()))
    except ValueError as e:
        return str(e)
    return "no error"


def test_heap_size_must_match_across_ranks(pools):
    for message in pools(2).run(_mismatched_heap_body):
        assert "iris.iris: ranks asked for different heap sizes [65536, 131072]" in message


def test_gpu_backends_without_a_gpu_say_so():
    """IRIS_BACKEND=cuda (or simulation) where torch sees no GPU: one clear error from the launcher, before any rank
    starts, and from iris.iris."""
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the error is for machines without one")
    program = "import iris\ndef main():\n    iris.iris(1 << 20)\nif __name__ == '__main__':\n    iris.run(main, 1)\n"
    for backend in ("cuda", "simulation"):
        proc = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=300,
                              env={**os.environ, "IRIS_BACKEND": backend})
        assert proc.returncode != 0
        assert f"iris.launch: IRIS_BACKEND={backend} runs on GPUs, but torch" in proc.stderr, proc.stderr[-2000:]
        assert "IRIS_BACKEND=cpu" in proc.stderr and "AttributeError" not in proc.stderr


def test_iris_names_its_options():
    """iris.iris's options are named in its signature (help() and IDEs show them), keyword-only past the first three."""
    import inspect

    parameters = inspect.signature(iris.iris).parameters
    assert list(parameters) == ["heap_size", "allocator_type", "engines", "timeout_s", "debug", "workspace_size",
                                "copy_engine", "enable_copy_engine", "sanitize"]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in list(parameters.values())[3:])
    with pytest.raises(TypeError, match="unexpected keyword argument 'heapsize'"):
        iris.iris(heapsize=1 << 20)


def test_ranks_label_their_lines(tmp_path):
    """IRIS_RANK_PREFIX=1: each rank's printed lines start with its label and stay whole, a line printed in pieces
    included; IRIS_RANK_PREFIX=0 leaves them as printed."""
    program = ("import sys, iris\n"
               "def main():\n"
               "    import os; r = os.environ['RANK']\n"
               "    for i in range(20):\n"
               "        print('piece', r, end=' '); sys.stdout.flush(); print('and the rest', i)\n"
               "    print('unfinished', r, end='')\n"
               "if __name__ == '__main__':\n"
               "    iris.run(main, 2)\n")
    script = tmp_path / "labelled.py"
    script.write_text(program)
    for setting in ("1", "0"):
        proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                              env={**os.environ, "IRIS_BACKEND": "cpu", "IRIS_RANK_PREFIX": setting})
        assert proc.returncode == 0, proc.stderr[-2000:]
        lines = [line for line in proc.stdout.splitlines() if line]
        if setting == "1":
            assert sorted(lines) == sorted([f"[rank {r}] piece {r} and the rest {i}" for r in (0, 1) for i in range(20)]
                                           + [f"[rank {r}] unfinished {r}" for r in (0, 1)]), lines
        else:
            assert not any(line.startswith("[rank") for line in lines) and len(lines) >= 20, lines
