#!/usr/bin/env bash
# The one-H200 figures of the misuse pass and the host-overhead work in one call (about 9 minutes):
#   bash scripts/gpu_owed.sh [OUT_DIR]
# 1. tests/test_misuse.py's cases that the GPU runs differently (kernels after the call returns; operands on the
#    device), two and three ranks sharing the GPU (IRIS_BACKEND=simulation);
# 2. benchmarks/host_overhead.py at world size 1 (COUNT calls, default 500): the collectives, the torch bindings,
#    allocation, the copy-engine puts and matmul_all_gather 4096^3 bf16 eager / graphed / cuBLAS;
# 3. scripts/gpu_moe.sh: the MoE tests at GPU sizes and the eager host time per dispatch + combine;
# 4. tests/test_providers.py, tests/test_launches.py and tests/test_ccl.py with two ranks sharing the GPU.
# Logs under OUT_DIR (default $OUT or results-local); the summary last, within DEADLINE_S (default 540) seconds.
# shellcheck source=scripts/gpu_harness.sh
source "$(dirname "$0")/gpu_harness.sh" "$@"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader
tests misuse 150 tests/test_misuse.py -k "stale_map or closed_context or another_offset or configs_differ or \
without_the_watchdog or past_our_count"
timeout 170 python3 benchmarks/host_overhead.py --out "$OUT_DIR" --world-size 1 --count "${COUNT:-500}" \
  > "$OUT_DIR/host_overhead.log" 2>&1
summary+=("host_overhead: exit $?")
bash scripts/gpu_moe.sh "$OUT_DIR" > "$OUT_DIR/moe.out" 2>&1
summary+=("gpu_moe: exit $?")
left=$(( ${DEADLINE_S:-540} - SECONDS ))  # what the call has left, so that the summary below always prints
tests providers_launches_ccl $(( left > 20 ? left - 10 : 10 )) tests/test_providers.py tests/test_launches.py \
  tests/test_ccl.py
grep -hE "^(FAILED|ERROR) " "$OUT_DIR"/*.log | head -20
sed -n '/rank(s),/,$p' "$OUT_DIR/host_overhead.log"
tail -12 "$OUT_DIR/moe.out"
printf '%s\n' "${summary[@]}"
