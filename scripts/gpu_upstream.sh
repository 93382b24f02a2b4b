#!/usr/bin/env bash
# Upstream Iris's examples and the device-code tests on one H200, ranks sharing it, in calls of under 10 minutes
# (or PART=all with RACE_RUNS=3 and a shorter TIER_TESTS in one):
#   UPSTREAM=.upstream PART=examples bash scripts/gpu_upstream.sh     # 1 below (carry .upstream)
#   UPSTREAM=.upstream PART=race bash scripts/gpu_upstream.sh         # 2 below
#   UPSTREAM=.upstream PART=upstream bash scripts/gpu_upstream.sh     # 1 and 2
#   PART=tier bash scripts/gpu_upstream.sh                            # 3 and 4 below
# 1. scripts/gpu_compat.sh: tests/test_compat.py, the dropped-contexts check at 2 ranks and at world size 1, and
#    upstream's examples and tests unchanged (scripts/run_upstream.py), 2 ranks sharing the GPU;
# 2. upstream's racy examples 16, 29 and 30, RACE_RUNS times each unchanged and RACE_RUNS times with the wait they lack
#    (scripts/upstream_race_tree.py writes those copies under $UPSTREAM/race; docs/upstream.md): the race is the
#    only cause when the copy passes every time;
# 3. the device-code test files (rma, atomics, sync, ccl, gluon, tracing, x, the copy engine's, misuse) at 2 ranks
#    sharing the GPU;
# 4. iris's device API on torch's symmetric memory beside iris's heap, world size 1 (scripts/gpu_symm_mem.py).
# Writes under $OUT; prints a short table last.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${OUT:-results-local}
mkdir -p "$OUT_DIR"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
UPSTREAM=${UPSTREAM:-.upstream}

PART=${PART:-upstream}
RACE_RUNS=${RACE_RUNS:-5}
TIER_TESTS=${TIER_TESTS:-test_rma test_atomics test_sync test_ccl test_gluon test_tracing test_x test_copy_engine_api \
test_misuse}
if [ "$PART" = upstream ] || [ "$PART" = examples ] || [ "$PART" = all ]; then
  # PART=all: only gpu_compat.sh's upstream run and its world-size-1 dropped contexts
  QUICK=$([ "$PART" = all ] && echo 1 || echo 0) UPSTREAM_TIMEOUT_S=200 OUT="$OUT_DIR" UPSTREAM="$UPSTREAM" \
    bash scripts/gpu_compat.sh > "$OUT_DIR/compat.txt" 2>&1
fi
races=()
if [ "$PART" = upstream ] || [ "$PART" = race ] || [ "$PART" = all ]; then
  python3 scripts/upstream_race_tree.py "$UPSTREAM" > "$OUT_DIR/race.log" 2>&1
  race() {  # race TREE EXAMPLE: how many of RACE_RUNS runs of TREE's EXAMPLE pass, 2 ranks sharing the GPU
    local passed=0
    for i in $(seq "$RACE_RUNS"); do
      IRIS_BACKEND=simulation timeout 90 python3 scripts/run_upstream.py "$1" --world-size 2 --timeout 80 \
        --only "examples/$2/" > "$OUT_DIR/race.$i.log" 2>&1
      grep -q "^passed" "$OUT_DIR/race.$i.log" && passed=$((passed + 1))
      cat "$OUT_DIR/race.$i.log" >> "$OUT_DIR/race.log"; rm -f "$OUT_DIR/race.$i.log"
    done
    echo "$passed/$RACE_RUNS"
  }
  for example in 16_gemm_one_shot_all_reduce_independent 29_x_all_reduce 30_x_all_gather; do
    races+=("example ${example%%_*} unchanged" "$(race "$UPSTREAM" "$example") passed"
            "example ${example%%_*} with the wait it lacks" "$(race "$UPSTREAM/race" "$example") passed")
  done
fi
if [ "$PART" = tier ] || [ "$PART" = all ]; then
  IRIS_BACKEND=cuda timeout 120 python3 scripts/gpu_symm_mem.py > "$OUT_DIR/symm_mem.txt" 2>&1
  IRIS_TEST_SCALE=gpu IRIS_BACKEND=simulation FILE_TIMEOUT_S=${FILE_TIMEOUT_S:-150} SKIP_BENCH=1 \
    TESTS="$TIER_TESTS" bash scripts/gpu_tier.sh "$OUT_DIR" > "$OUT_DIR/tier.txt" 2>&1
fi
echo "=== gpu_upstream summary"
[ -s "$OUT_DIR/compat.txt" ] && sed -n '/=== gpu_compat summary/,$p' "$OUT_DIR/compat.txt"
[ ${#races[@]} -gt 0 ] && printf '%-44s %s\n' "${races[@]}"
if [ "$PART" = tier ] || [ "$PART" = all ]; then
  grep -E "^(iris heap|torch symm_mem|symm_mem:)" "$OUT_DIR/symm_mem.txt" || tail -5 "$OUT_DIR/symm_mem.txt"
  grep -E "^tests/test_.*exit" "$OUT_DIR/tier.txt"
fi
