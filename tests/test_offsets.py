"""64-bit element offsets in the collectives, checked where they are decided: in the kernels compiled for sm_90.

A call with fewer than 2**31 elements per rank gets ``n`` as an i32 (Triton specialises integer arguments by
value), yet its slot and slice offsets (``group_index * n``) and block starts pass 2**31 from the third rank on
(an int8 all_gather of 1.2e9 elements per rank over three ranks). The kernels must do that arithmetic in 64 bits,
once per block, and keep the per-element offsets and masks 32-bit. Compiled in a subprocess without
``TRITON_INTERPRET`` (no GPU is needed to compile); the GPU tier runs the calls themselves past 2**31
(``scripts/ccl_past_2g.py``).
"""

import functools
import json
import os
import subprocess
import sys

import pytest

PROBE = os.path.join(os.path.dirname(__file__), "offsets_probe.py")
KERNELS = ["all_gather", "all_to_all", "reduce_scatter_push", "all_reduce_one_shot", "all_reduce_staged",
           "all_reduce_two_shot", "pull_from_root", "root_pulls", "reduce_scatter_v"]


@functools.lru_cache(maxsize=None)
def probe():
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "TRITON_DEBUG", "IRIS_DEBUG")}
    env["IRIS_BACKEND"] = "cuda"  # compile only: no context is created, so no GPU is needed
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.dirname(os.path.dirname(PROBE)), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, PROBE], env=env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        raise AssertionError(f"offsets_probe.py failed:\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("kernel", KERNELS)
def test_element_offsets_are_64_bit_once_per_block(kernel):
    found = probe()[kernel]
    assert found["i32_multiplies_of_n"] == [], found  # group_index * n in 32 bits wraps from the third rank on
    assert found["block_loop_types"] and set(found["block_loop_types"]) == {"i64"}, found
    assert found["i32_lane_masks"] >= 1, found  # per-element masks stay on 32-bit lanes
    assert found["i64_block_adds"] == 0, found  # no 64-bit add per element: the 64-bit work is per block


@pytest.mark.parametrize("kernel", ["all_gather", "all_to_all", "all_reduce_one_shot", "reduce_scatter_push"])
def test_block_addressing_stays_vectorised(kernel):
    assert probe()[kernel]["vector_accesses"], probe()[kernel]  # 16-byte ld/st.global.v4 with the vector hint
