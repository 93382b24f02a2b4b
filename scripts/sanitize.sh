#!/usr/bin/env bash
# compute-sanitizer over a representative subset of the GPU tier, at the CPU tier's small sizes (the tools
# slow kernels down 10-100x): load/store/put/get/copy, atomics (add, cas, contention), every collective in
# bf16, and the fused ops. Every rank process is followed (--target-processes all); one log per process.
#   scripts/sanitize.sh [OUT_DIR]          TOOLS="memcheck racecheck" by default
# FILTER (a pytest -k expression) narrows the subset; TOOL_TIMEOUT_S (default 540) bounds each tool's run.
# memcheck ran the first five tests of the subset in 250 s on 2 x H200; split the calls accordingly.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:-${OUT:-results-local}}/sanitizer
mkdir -p "$OUT_DIR"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" IRIS_TEST_WORLD_SIZES=2
unset IRIS_TEST_SCALE TRITON_INTERPRET IRIS_BACKEND
SUBSET=(tests/test_rma.py tests/test_atomics.py tests/test_ccl.py tests/test_ops.py)
FILTER=${FILTER:-"(float32 and 777) or add-torch.float32 or cas-torch.int32 or contention or (test_collectives and bfloat16-2) or (fused_ops and bfloat16)"}
for tool in ${TOOLS:-memcheck racecheck}; do
  timeout "${TOOL_TIMEOUT_S:-540}" compute-sanitizer --tool "$tool" --target-processes all --log-file "$OUT_DIR/$tool.%p.log" \
    python3 -m pytest -q -p no:cacheprovider "${SUBSET[@]}" -k "$FILTER" > "$OUT_DIR/$tool.pytest.log" 2>&1
  rc=$?
  summary=$(grep -h "ERROR SUMMARY\|RACECHECK SUMMARY" "$OUT_DIR/$tool".*.log 2>/dev/null | sort | uniq -c | tr -s ' ' | tr '\n' ';')
  logs=$(ls "$OUT_DIR/$tool".[0-9]*.log 2>/dev/null | wc -l)
  echo "$tool: exit $rc, $(tail -1 "$OUT_DIR/$tool.pytest.log"); $logs process logs; $summary"
done
