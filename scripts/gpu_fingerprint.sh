#!/usr/bin/env bash
# The call fingerprint on one H200 (docs/results.md): its cost, the one-shot all_reduce of 8 KiB graphed and eager,
# at world size 1 and with two ranks sharing the GPU, in the tree before it (BEFORE: a copy of that commit's iris/)
# and in this one, alternated; then the tests it touches at GPU scale with ranks sharing. PART=latency|tests|all.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
BEFORE=${BEFORE:-.before}
PART=${PART:-all}
OUT=${OUT:-/tmp}
TESTS=${TESTS:-tests/test_misuse.py tests/test_fault.py tests/test_sync.py}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader
if [ "$PART" != tests ]; then
  for run in "1 before" "1 after" "2 before" "2 after" "1 before" "1 after"; do
    set -- $run
    tree=$([ "$2" = before ] && echo "$BEFORE" || echo .)
    backend=$([ "$1" = 1 ] && echo cuda || echo simulation)
    LATENCY_SIZES=8192 IRIS_BACKEND=$backend PYTHONPATH=$tree timeout 150 python scripts/all_reduce_latency.py "$2" "$1" \
      >> "$OUT/latency.log" 2>&1 || echo "latency $run: rc $?"
  done
fi
if [ "$PART" != latency ]; then
  IRIS_TEST_SCALE=gpu IRIS_BACKEND=simulation PYTHONPATH=. timeout -s INT ${TESTS_S:-420} python -m pytest -q -rfE --tb=short $TESTS \
    > "$OUT/tests.log" 2>&1
  echo "tests rc $?"; grep -E "^(FAILED|ERROR)|passed|failed|^E  " "$OUT/tests.log" | tail -40
fi
grep -h "^LAT" "$OUT/latency.log" 2>/dev/null
