"""Compiled tier without a GPU: the device API compiles for Hopper (sm_90) with Triton's own LLVM and ptxas,
and the PTX shows what we promise: translated accesses stay 16-byte vectors when given a ``hint``, and
``sem``/``scope`` reach the atomic instructions.

Runs in a subprocess because the test process itself may be in interpreter mode (TRITON_INTERPRET=1).
"""

import glob
import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PROBE = os.path.join(HERE, "compile_probe.py")


def _compile_env(debug=False):
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "TRITON_DEBUG", "IRIS_DEBUG")}
    env["IRIS_BACKEND"] = "cuda"  # compile only: no context is created, so no GPU is needed
    if debug:
        env["IRIS_DEBUG"] = "1"
    return env


def _probe(debug):
    proc = subprocess.run([sys.executable, PROBE], env=_compile_env(debug), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.split("RESULT", 1)[1])


@pytest.fixture(scope="module")
def compiled():
    return _probe(debug=False)


@pytest.fixture(scope="module")
def compiled_debug():
    return _probe(debug=True)


@pytest.mark.parametrize("op", ["load", "store", "get", "put", "copy"])
def test_hint_keeps_remote_accesses_vectorised(compiled, op):
    # With the hint every global access is a 16-byte vector.
    assert compiled[f"{op}/16"] and all(".v4" in a for a in compiled[f"{op}/16"] if ".b64" not in a), \
        compiled[f"{op}/16"]


@pytest.mark.parametrize("op", ["load", "store", "get", "put", "copy"])
def test_remote_accesses_without_hint_stay_vectorised(compiled, op):
    # translate() adds the heap bases' difference (a multiple of 256 bytes) to the pointer itself, so what the
    # compiler knows of the local block (16-byte aligned, 1024 contiguous fp32) holds for the remote one: every data
    # access is a 16-byte vector (the .b64 loads are the two heap bases), none is a scalar 4-byte access.
    accesses = compiled[f"{op}/None"]
    data = [a for a in accesses if ".b64" not in a]
    assert data and all(".v4" in a for a in data), accesses
    assert compiled[f"{op}/None"] == compiled[f"{op}/16"], accesses


def test_tile_stores_to_peers_are_16_byte_vectors(compiled):
    # iris.x.all_gather of a bf16 64 x 64 tile, no hint given: remote tile stores as st.global.v4, no 2-byte ones.
    accesses = compiled["x/all_gather"]
    assert "st.global.v4.b32" in accesses and "st.global.b16" not in accesses, accesses


@pytest.mark.parametrize("sem", ["relaxed", "acquire", "release", "acq_rel"])
@pytest.mark.parametrize("scope", ["cta", "gpu", "sys"])
def test_sem_and_scope_reach_the_instruction(compiled, sem, scope):
    instructions = compiled[f"atom/{sem}/{scope}"]
    assert any(".add" in i for i in instructions) and any(".cas" in i for i in instructions), instructions
    ptx_scope = {"cta": ".cta", "gpu": ".gpu", "sys": ".sys"}[scope]
    for i in instructions:
        # PTX spells the default gpu scope either explicitly or not at all.
        assert ptx_scope in i or (scope == "gpu" and ".cta" not in i and ".sys" not in i), i
        assert f".{sem}" in i or (sem == "relaxed" and not any(s in i for s in (".acquire", ".release", ".acq_rel"))), i


def test_device_context_compiles_vectorised(compiled):
    accesses = compiled["context"]
    assert "ld.global.v4.b32" in accesses and "st.global.v4.b32" in accesses, accesses
    assert any(a.startswith("atom.global.sys.release") or a.startswith("red.global.sys.release") for a in accesses), \
        accesses


@pytest.mark.parametrize("sem,synchronised", [("release", True), ("acq_rel", True), ("relaxed", False),
                                              ("acquire", False)])
def test_release_covers_every_warp_of_the_program(compiled, sem, synchronised):
    # Triton performs a one-address atomic from a single thread; without a CTA barrier between the other
    # warps' data stores and that release, a peer could acquire the flag before the data is there.
    assert compiled[f"publish/{sem}"] is synchronised


CCL_KERNELS = ["_all_reduce_one_shot_kernel", "_all_reduce_two_shot_kernel", "_all_gather_kernel",
               "_all_to_all_kernel", "_pull_from_root_kernel", "_root_pulls_kernel", "_reduce_scatter_push_kernel"]


@pytest.mark.parametrize("kernel", CCL_KERNELS)
def test_collective_kernels_compile_with_vector_data_paths(compiled, kernel):
    accesses = compiled[f"ccl/{kernel}"]
    # bf16 data moves as 16-byte vectors both ways. The flag spin is a load at sys scope: relaxed in the
    # barriers that only order across kernel boundaries (entry, and the one-shot kernel's exit after reads),
    # acquire in those after stores to peers.
    assert "ld.global.v4.b32" in accesses and "st.global.v4.b32" in accesses, accesses
    relaxed = {"_all_reduce_one_shot_kernel": (True, False), "_all_reduce_two_shot_kernel": (True, True),
               "_all_gather_kernel": (True, True), "_all_to_all_kernel": (True, True),
               "_reduce_scatter_push_kernel": (True, True)}.get(kernel, (False, True))
    spins = (any(a.startswith("ld.global.sys.relaxed.b") for a in accesses),
             any(a.startswith("ld.global.sys.acquire.b") for a in accesses))  # the barriers' words are b64
    assert spins == relaxed, accesses


@pytest.mark.parametrize("op", ["load", "store", "get", "put", "copy"])
def test_debug_checks_cost_nothing_when_off(compiled, compiled_debug, op):
    # Off: not one instruction of the checks is compiled (no assert, no printf), and the data path is the
    # same 16-byte vectors. On: the checks are there.
    for hint in (None, 16):
        assert not compiled[f"debug_code/{op}/{hint}"]
        assert compiled_debug[f"debug_code/{op}/{hint}"]
    assert compiled[f"{op}/16"] == [a for a in compiled_debug[f"{op}/16"] if a in compiled[f"{op}/16"]]


@pytest.mark.parametrize("kernel", ["_matmul_kernel", "_matmul_kernel_tma", "_matmul_all_gather_kernel",
                                    "_all_gather_matmul_kernel", "_all_gather_matmul_engines_kernel",
                                    "_matmul_reduce_kernel"])
def test_gemm_kernels_use_hopper_tensor_cores(compiled, kernel):
    assert "wgmma.mma_async" in compiled[f"ops/{kernel}"], compiled[f"ops/{kernel}"]


H100_SHARED_BYTES = 232448  # the most shared memory one program may take on sm_90 (227 KiB)


@pytest.mark.parametrize("dtype", ["bf16", "fp32"])
@pytest.mark.parametrize("kernel", ["_matmul_kernel", "_matmul_all_gather_kernel", "_matmul_reduce_kernel",
                                    "_all_gather_matmul_kernel", "_all_gather_matmul_engines_kernel",
                                    "_matmul_all_gather_kernel_copy_engine",
                                    "_matmul_reduce_kernel_copy_engine"])
def test_gemm_kernels_fit_an_sm_at_the_default_config(compiled, kernel, dtype):
    # at OpsConfig's GPU tiles and stages; an overflow only shows at launch, on the GPU
    assert 0 < compiled[f"shared/{kernel}/{dtype}"] <= H100_SHARED_BYTES, compiled[f"shared/{kernel}/{dtype}"]


@pytest.mark.parametrize("kernel", ["_matmul_kernel", "_matmul_reduce_kernel", "_all_gather_matmul_kernel",
                                    "_all_gather_matmul_engines_kernel"])
def test_gemm_mainloop_is_fed_by_tma(compiled, kernel):
    assert compiled[f"tma/{kernel}"], "no cp.async.bulk.tensor load in the TMA mainloop"


def test_copy_engine_variant_stores_locally_and_publishes_each_count(compiled):
    # the tile's local store keeps 16-byte vectors, and each warp's system-scope fence orders it before the band's
    # count, which a stream (not a kernel) waits for before its copy engine reads the band
    accesses, fenced = compiled["copy_engine/_matmul_all_gather_kernel"]
    assert "st.global.v4.b32" in accesses and "st.global.b16" not in accesses, accesses
    assert fenced
    # and the flattened tile loop is still software-pipelined: as much shared memory (3 operand stages) as without
    # the counts (a program-wide barrier there left one stage, and the kernel 3x slower on H200)
    plain, counted = compiled["copy_engine/pipelined"]
    assert counted == plain, (plain, counted)
    # reduce_scatter's partials (and all_reduce's partials and reduced tiles) for the copy engines: the same local
    # vectors and fenced per-warp counts
    for variant in ("", "/all_reduce"):
        accesses, fenced = compiled[f"copy_engine/_matmul_reduce_kernel{variant}"]
        assert "st.global.v4.b32" in accesses and "st.global.b16" not in accesses, accesses
        assert fenced
    # all_gather_matmul's rows, written by the copy engines, are read by TMA only after an async-proxy fence; its
    # tile loops are pipelined like the plain GEMM's (as much shared memory: 3 operand stages)
    assert compiled["fence/_all_gather_matmul_engines_kernel"]
    assert compiled["shared/_all_gather_matmul_engines_kernel/bf16"] == compiled["shared/_matmul_kernel/bf16"]


def test_fused_reduce_pushes_16_byte_vectors(compiled):
    # staged partials and finished tiles cross the link as st.global.v4; no 2-byte scalar stores
    accesses = compiled["ops_access/_matmul_reduce_kernel"]
    assert "st.global.v4.b32" in accesses and "st.global.b16" not in accesses, accesses


def test_tracing_reads_the_gpu_clocks_only_when_compiled_in(compiled):
    assert compiled["trace/off"] is False  # TRACE=False: not one clock read
    assert compiled["trace/on"] == [True, True]  # %globaltimer for times, %smid for the SM


def test_fused_ops_move_tiles_as_16_byte_vectors(compiled):
    # the scatter's remote stores and the pull's remote A loads keep their vector width through translate
    assert "st.global.v4.b32" in compiled["ops_access/_matmul_all_gather_kernel"]
    assert "st.global.b16" not in compiled["ops_access/_matmul_all_gather_kernel"]
    # all_gather_matmul: rows that arrived by stores are read by TMA only after an async-proxy fence
    assert compiled["fence/_all_gather_matmul_kernel"]
    # all_gather_matmul's communication programs copy A rows to peers as 16-byte vectors
    assert "st.global.v4.b32" in compiled["ops_access/_all_gather_matmul_kernel"]
    assert "st.global.b16" not in compiled["ops_access/_all_gather_matmul_kernel"]


def test_barrier_signal_fences_once_then_adds_relaxed(compiled):
    # one release for the whole program and every member: bar.sync, fence.acq_rel.sys, then one relaxed
    # system-scope add per member (2 here); no release atomics, which would fence again per member
    seq = compiled["barrier/sequence"]
    atoms = [i for i, op in enumerate(seq) if op.startswith("atom.")]
    assert [seq[i] for i in atoms] == ["atom.global.sys.relaxed.add.u64"] * 2, seq
    fences = [i for i, op in enumerate(seq) if op.startswith(("fence.", "membar."))]
    assert [seq[i] for i in fences] == ["fence.acq_rel.sys"] and fences[0] < atoms[0], seq
    assert "bar.sync" in seq[:fences[0]], seq


GLUON_TRACING_TEST = "test_gluon.py::test_tracing_from_gluon_and_triton_kernels_records_the_same_events"


def test_launched_kernels_compile_for_sm90(request):
    # Every kernel of tests/ and examples/ that the CPU tier ran in the interpreter, at the specialisation it ran
    # (signature, constexprs, alignment, options), compiles for sm_90: the interpreter accepts programs that
    # ptxas or the MLIR verifier refuse (a volatile load with a cache modifier; an atomic_cas whose Python-int
    # cmp does not match an int64 pointer). conftest.py runs this test last, after the launches it checks.
    directory = os.environ.get("IRIS_LAUNCH_LOG")
    if not directory or not glob.glob(os.path.join(directory, "launches-*.pkl")):
        pytest.skip("no kernel was interpreted in this session (the check follows the CPU tier's launches)")
    script = os.path.join(HERE, "compile_launches.py")
    proc = subprocess.run([sys.executable, script, directory, HERE, os.path.join(os.path.dirname(HERE), "examples")],
                          env=_compile_env(), capture_output=True, text=True, timeout=1800, cwd=os.path.dirname(HERE))
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(proc.stdout.split("RESULT", 1)[1])
    assert not result["failures"], "\n".join(result["failures"])
    assert result["compiled"] > 0
    # @gluon.jit launches are recorded as @triton.jit ones are; when test_gluon's tracing test ran, its Gluon kernel
    # (ctx.tracing on a Gluon layout block, which the interpreter does not verify) is among what compiled
    if any(item.nodeid.endswith(GLUON_TRACING_TEST) for item in request.session.items):
        assert "tests/test_gluon.py::_traced_gluon_kernel" in result["kernels"], result["kernels"]
