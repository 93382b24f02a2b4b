#!/usr/bin/env bash
# Host overhead on one H200 (about 3 minutes):
#   bash scripts/gpu_hostpath.sh [OUT_DIR]
# 1. tests/test_launches.py at GPU sizes, two ranks sharing the GPU (IRIS_BACKEND=simulation): remembered launches
#    go through the compiled kernel's launcher there, so the cache-key tests check the direct launch too;
# 2. benchmarks/host_overhead.py at world size 1: host time per eager call beside NCCL, torch symmetric memory and
#    torch.empty, and the profile of back-to-back calls (kernel time vs issue time per call).
# Writes tests.log, host_overhead.log, host_overhead.csv and host_overhead.json to OUT_DIR (default $OUT or
# results-local); prints the benchmark's table last.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:-${OUT:-results-local}}
mkdir -p "$OUT_DIR"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" IRIS_TEST_SCALE=gpu
unset TRITON_INTERPRET
IRIS_BACKEND=simulation timeout 150 python3 -m pytest -q -rfE --tb=short -p no:cacheprovider tests/test_launches.py \
  > "$OUT_DIR/tests.log" 2>&1
tests_rc=$?
unset IRIS_BACKEND
timeout 150 python3 benchmarks/host_overhead.py --out "$OUT_DIR" --world-size 1 --count "${COUNT:-2000}" \
  > "$OUT_DIR/host_overhead.log" 2>&1
bench_rc=$?
echo "tests/test_launches.py (simulation, 2 ranks on one GPU): exit $tests_rc, $(grep -E '[0-9]+ (passed|failed)' "$OUT_DIR/tests.log" | tail -1)"
grep -E "^(FAILED|ERROR) " "$OUT_DIR/tests.log"
echo "benchmarks/host_overhead.py: exit $bench_rc"
sed -n '/rank(s),/,$p' "$OUT_DIR/host_overhead.log"
exit $(( tests_rc != 0 || bench_rc != 0 ))
