#!/usr/bin/env bash
# compute-sanitizer over a representative subset of the GPU tier, at the CPU tier's small sizes (the tools
# slow kernels down 10-100x): load/store/put/get/copy, atomics (add, cas, contention), every collective in
# bf16, and the fused ops. Every rank process is followed (--target-processes all), into one log.
#   scripts/sanitize.sh [OUT_DIR]          TOOLS="memcheck racecheck" by default
# FILTER (a pytest -k expression) narrows the subset; TOOL_TIMEOUT_S (default 540) bounds each tool's run.
# memcheck ran the first five tests of the subset in 250 s on 2 x H200; split the calls accordingly.
# Before memcheck, a canary (scripts/sanitizer_canary.py) plants one out-of-bounds store in each of 2 rank
# processes: 32 reports per rank (one per lane) show the tool follows the ranks iris starts; every followed
# process writes into the one log (CANARY=0 leaves it out).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${1:-${OUT:-results-local}}/sanitizer
mkdir -p "$OUT_DIR"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" IRIS_TEST_WORLD_SIZES=2
unset IRIS_TEST_SCALE TRITON_INTERPRET IRIS_BACKEND
SUBSET=(tests/test_rma.py tests/test_atomics.py tests/test_ccl.py tests/test_ops.py)
FILTER=${FILTER:-"(float32 and 777) or add-torch.float32 or cas-torch.int32 or contention or (test_collectives and bfloat16-2) or (fused_ops and bfloat16)"}
if [[ " ${TOOLS:-memcheck racecheck} " == *" memcheck "* && "${CANARY:-1}" != 0 ]]; then
  timeout 120 compute-sanitizer --tool memcheck --target-processes all --log-file "$OUT_DIR/canary.%p.log" \
    python3 scripts/sanitizer_canary.py > "$OUT_DIR/canary.out" 2>&1
  rc=$?
  # one log holds every followed process; each rank's kernel stores 32 lanes out of bounds
  reports=$(cat "$OUT_DIR"/canary.*[0-9].log 2>/dev/null | grep -c "Invalid __global__ write")
  echo "canary: exit $rc, $(tail -1 "$OUT_DIR/canary.out"); $reports invalid-write reports (64 when both" \
       "rank processes are followed, 32 when one is)"
fi
for tool in ${TOOLS:-memcheck racecheck}; do
  timeout "${TOOL_TIMEOUT_S:-540}" compute-sanitizer --tool "$tool" --target-processes all --log-file "$OUT_DIR/$tool.%p.log" \
    python3 -m pytest -q -p no:cacheprovider "${SUBSET[@]}" -k "$FILTER" > "$OUT_DIR/$tool.pytest.log" 2>&1
  rc=$?
  summary=$(grep -h "ERROR SUMMARY\|RACECHECK SUMMARY" "$OUT_DIR/$tool".*.log 2>/dev/null | sort | uniq -c | tr -s ' ' | tr '\n' ';')
  echo "$tool: exit $rc, $(tail -1 "$OUT_DIR/$tool.pytest.log"); $summary"
done
