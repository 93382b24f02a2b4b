#!/usr/bin/env bash
# The whole GPU tier in one call, for a machine with 2+ NVIDIA GPUs:
#   scripts/gpu_tier.sh [OUT_DIR]
# 1. the test suite at real sizes on the cuda backend (same test bodies as the CPU tier),
# 2. the benchmarks named in BENCH (default "micro ccl ops"): the microbenchmarks (benchmarks/run_all.py,
#    including the 1 GiB put/get/store check), the collectives against NCCL and torch symmetric memory
#    (benchmarks/ccl.py), the fused ops against cuBLAS + NCCL (benchmarks/ops.py), and "soak" (SOAK_COUNT
#    random collectives, default 10000, each checked: benchmarks/soak.py),
# then a short summary table last. Full logs and results go to OUT_DIR (default $OUT or results-local).
# SKIP_TESTS=1 or SKIP_BENCH=1 leave out a half.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:-${OUT:-results-local}}
mkdir -p "$OUT_DIR"
# NVLink multicast stays off on these machines.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" IRIS_TEST_SCALE=gpu
export IRIS_TEST_WORLD_SIZES=${IRIS_TEST_WORLD_SIZES:-2}
unset TRITON_INTERPRET IRIS_BACKEND

{
  date -u +"date: %Y-%m-%dT%H:%M:%SZ"
  echo "commit: ${IRIS_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader
  nvidia-smi topo -m 2>/dev/null | head -5
  python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, 'cuda', torch.version.cuda)"
} 2>&1 | tee "$OUT_DIR/environment.txt"

tests_rc=0
if [ "${SKIP_TESTS:-0}" != 1 ]; then
  python3 -m pytest -q tests --ignore=tests/test_examples.py -p no:cacheprovider --junitxml="$OUT_DIR/gpu_tests.xml" \
    2>&1 | tee "$OUT_DIR/gpu_tests.log"
  tests_rc=${PIPESTATUS[0]}
fi

bench_rc=0
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  for bench in ${BENCH:-micro ccl ops}; do
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
[ -f "$OUT_DIR/gpu_tests.log" ] && grep -E "passed|failed|error" "$OUT_DIR/gpu_tests.log" | tail -1
echo "tests exit code: $tests_rc, benchmarks exit code: $bench_rc"
exit $(( tests_rc != 0 || bench_rc != 0 ))
