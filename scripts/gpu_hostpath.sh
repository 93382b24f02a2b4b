#!/usr/bin/env bash
# Host overhead on one H200 (about 8 minutes; the benchmark first, then the tests):
#   bash scripts/gpu_hostpath.sh [OUT_DIR]
# 1. tests at GPU sizes: tests/test_launches.py, tests/test_copy_lanes.py and tests/test_allocator.py with two ranks
#    sharing the GPU (IRIS_BACKEND=simulation: remembered launches go through the compiled kernel's launcher there,
#    so the cache-key tests check the direct launch too); tests/test_copy_engine_api.py at world size 1 (put and
#    put_tiles on the driver, the tiles in one batched call, every byte checked); tests/test_init_process_group.py
#    (dist.init_process_group("iris") under iris.run and torchrun, the staged all_reduce's copy inside its kernel);
#    tests/test_heap.py and tests/test_distributed.py with two ranks sharing the GPU (allocation by the direct CUDA
#    constructor; the torch backend's collectives);
# 2. benchmarks/host_overhead.py at world size 1: host time per eager call beside NCCL, torch symmetric memory,
#    torch.empty, Tensor.copy_ and bare cuMemcpy2DAsync calls, and the profile of back-to-back calls (kernel time vs
#    issue time per call).
# Writes tests.log, host_overhead.log, host_overhead.csv and host_overhead.json to OUT_DIR (default $OUT or
# results-local); prints the benchmark's table last.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:-${OUT:-results-local}}
mkdir -p "$OUT_DIR"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" IRIS_TEST_SCALE=gpu
unset TRITON_INTERPRET
PYTEST="python3 -m pytest -q -rfE --tb=short -p no:cacheprovider -o faulthandler_timeout=60"
: > "$OUT_DIR/tests.log"
tests_rc=0
run_tests() {  # label, environment assignments then test files
  local label=$1; shift
  echo "=== $label" >> "$OUT_DIR/tests.log"
  env "$@" >> "$OUT_DIR/tests.log" 2>&1
  local rc=$?
  echo "$label: exit $rc, $(grep -E '[0-9]+ (passed|failed)' "$OUT_DIR/tests.log" | tail -1)"
  tests_rc=$(( tests_rc || rc ))
}
timeout 200 python3 benchmarks/host_overhead.py --out "$OUT_DIR" --world-size 1 --count "${COUNT:-2000}" \
  > "$OUT_DIR/host_overhead.log" 2>&1
bench_rc=$?
run_tests "launches, lanes, allocator (simulation, 2 ranks)" IRIS_BACKEND=simulation timeout 200 $PYTEST \
  tests/test_launches.py tests/test_copy_lanes.py tests/test_allocator.py
run_tests "copy-engine API (world size 1)" IRIS_TEST_WORLD_SIZES=1 timeout 200 $PYTEST tests/test_copy_engine_api.py \
  -k "not peer_error"
run_tests "heap, distributed (simulation, 2 ranks)" IRIS_BACKEND=simulation timeout 240 $PYTEST tests/test_heap.py \
  tests/test_distributed.py
run_tests "init_process_group (simulation)" IRIS_BACKEND=simulation timeout 300 $PYTEST tests/test_init_process_group.py
grep -E "^(FAILED|ERROR) " "$OUT_DIR/tests.log"
echo "benchmarks/host_overhead.py: exit $bench_rc"
sed -n '/rank(s),/,$p' "$OUT_DIR/host_overhead.log"
exit $(( tests_rc != 0 || bench_rc != 0 ))
