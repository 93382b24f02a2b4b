#!/usr/bin/env bash
# The one-GPU check of the CPU tier's latest changes, in one call (about 5 to 7 minutes; last passed on one H100 at
# c9e8e5d, results/1xH100/recheck.log):
#   bash scripts/gpu_recheck.sh [OUT_DIR]
# Ranks share the GPU (IRIS_BACKEND=simulation). Already passed on one GPU at GPU sizes (docs/results.md, "GPU
# tier"): every collective x 6 dtypes at 2 and 4 ranks, the torch backend and the records, the fused ops' records,
# tracing, iris.x, the copy engines, RMA, the tutorials. This one runs:
# 1. reduce_scatter_v (its mismatch check now synchronises before it looks), the CUDA-graph replays, empty and soak;
# 2. operands that share bytes (refused, and the in-place forms right, on the device), the fused ops' bad input, the
#    mismatch cases that a GPU reports after its kernel (settled when the rank's function returns);
# 3. test_fault: the watchdog raises nothing into a rank between the launcher's calls.
# Logs under OUT_DIR (default $OUT or results-local); the summary last, within DEADLINE_S (default 540) seconds.
# shellcheck source=scripts/gpu_harness.sh
source "$(dirname "$0")/gpu_harness.sh" "$@"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
tests ccl 150 tests/test_ccl.py::test_reduce_scatter_v tests/test_ccl.py::test_collectives_replay_in_cuda_graph \
  tests/test_ccl.py::test_empty_collectives_return tests/test_ccl.py::test_soak_of_random_collectives
tests ops_misuse 200 tests/test_ops.py::test_bad_input tests/test_misuse.py -k \
  "bad_input or overlap or another_offset or configs_differ or without_the_watchdog"
left=$(( ${DEADLINE_S:-540} - SECONDS ))  # what the call has left, so that the summary below always prints
tests fault $(( left > 20 ? left - 10 : 10 )) tests/test_fault.py
grep -hE "^(FAILED|ERROR) " "$OUT_DIR"/*.log | head -20
printf '%s\n' "${summary[@]}"
