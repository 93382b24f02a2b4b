#!/usr/bin/env bash
# The whole GPU tier in one call, for a machine with 2+ NVIDIA GPUs:
#   scripts/gpu_tier.sh [OUT_DIR]
# 1. the test suite at real sizes on the cuda backend (same test bodies as the CPU tier),
# 2. the benchmarks named in BENCH (default "micro ccl ops host_overhead"): the microbenchmarks (benchmarks/run_all.py,
#    including the 1 GiB put/get/store check), the collectives against NCCL and torch symmetric memory
#    (benchmarks/ccl.py), the fused ops against cuBLAS + NCCL (benchmarks/ops.py), and "soak" (SOAK_COUNT
#    random collectives, default 10000, each checked: benchmarks/soak.py), and the host time per eager call
#    (benchmarks/host_overhead.py, at world size 1),
# then a short summary table last. Full logs and results go to OUT_DIR (default $OUT or results-local).
# SKIP_TESTS=1 or SKIP_BENCH=1 leave out a half. TESTS="test_rma test_ops ..." runs only those test files
# (default: every tests/test_*.py but test_examples); each file runs on its own with its failures reported as
# soon as it ends, under FILE_TIMEOUT_S (default 240), so a slow or hung file cannot hide the others' results.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:-${OUT:-results-local}}
mkdir -p "$OUT_DIR"
# NVLink multicast stays off on these machines.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" IRIS_TEST_SCALE=gpu
# the tests at 2 ranks and at every larger power of two up to the GPU count (2,4,8 on eight GPUs)
gpus=$(python3 -c "import torch; print(torch.cuda.device_count())" 2>/dev/null || echo 0)  # the visible ones
sizes=2; for w in 4 8 16; do [ "$w" -le "$gpus" ] && sizes="$sizes,$w"; done
export IRIS_TEST_WORLD_SIZES=${IRIS_TEST_WORLD_SIZES:-$sizes}
unset TRITON_INTERPRET IRIS_BACKEND

{
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  # "-dirty": the tree is not that commit (a copy of the tree can travel with an older .git)
  echo "commit: ${IRIS_COMMIT:-$(git describe --always --dirty 2>/dev/null || echo unknown)}"
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader
  nvidia-smi topo -m 2>/dev/null | head -5
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'cuda', torch.version.cuda)"
} 2>&1 | tee "$OUT_DIR/environment.txt"

tests_rc=0
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  files=${TESTS:-$(cd tests && ls test_*.py | sed 's/\.py$//' | grep -v '^test_examples$')}
  : > "$OUT_DIR/gpu_tests.log"
  for name in $files; do
    echo "=== tests/$name.py" >> "$OUT_DIR/gpu_tests.log"
    timeout "${FILE_TIMEOUT_S:-240}" python3 -m pytest -q -rfE --tb=short -p no:cacheprovider "tests/$name.py" \
      --junitxml="$OUT_DIR/junit_$name.xml" >> "$OUT_DIR/gpu_tests.log" 2>&1
    rc=$?
    [ "$rc" = 124 ] && echo "tests/$name.py: stopped after ${FILE_TIMEOUT_S:-240} s" >> "$OUT_DIR/gpu_tests.log"
    echo "tests/$name.py: exit $rc, $(grep -E '[0-9]+ (passed|failed)' "$OUT_DIR/gpu_tests.log" | tail -1)"
    [ "$rc" = 0 ] || tests_rc=$rc
  done
fi

bench_rc=0
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  for bench in ${BENCH:-micro ccl ops host_overhead}; do
    extra=()
    case $bench in
      micro) script=benchmarks/run_all.py; dir=microbench ;;
      soak) script=benchmarks/soak.py; dir=soak; extra=(--count "${SOAK_COUNT:-10000}") ;;
      *) script=benchmarks/$bench.py; dir=$bench ;;
    esac
    python3 "$script" --out "$OUT_DIR/$dir" "${extra[@]}" 2>&1 | tee "$OUT_DIR/bench_$bench.log"
    rc=${PIPESTATUS[0]}
    [ "$rc" = 0 ] || bench_rc=$rc
  done
fi

echo
echo "==================== GPU tier summary ===================="
cat "$OUT_DIR/environment.txt" | head -4
[ -f "$OUT_DIR/gpu_tests.log" ] && grep -E "^(FAILED|ERROR) |stopped after" "$OUT_DIR/gpu_tests.log"
echo "tests exit code: $tests_rc, benchmarks exit code: $bench_rc"
exit $(( tests_rc != 0 || bench_rc != 0 ))
