#!/usr/bin/env bash
# Gluon on one H200, in under three minutes:
#   bash scripts/gpu_gluon.sh [UPSTREAM_CHECKOUT]
# 1. tests/test_gluon.py at GPU sizes, its ranks sharing the GPU (IRIS_BACKEND=simulation): the context's methods,
#    the Gluon all_gather / all_to_all, the TMA all_gather, tracing;
# 2. with an upstream Iris checkout given, its Gluon unit tests with the lane count changed (scripts/upstream_gluon.sh;
#    not counted in the three minutes);
# 3. benchmarks/gluon_all_gather.py: Triton, Gluon register stores and Gluon TMA for the same 256 MiB bf16 all_gather,
#    bandwidth by program count and the SMs each needs for 90% of the copy ceiling, at world size 1 and with 2 ranks
#    sharing the GPU (every call's output checked against torch first);
# 4. tests/gluon_probe.py: the sm_90 PTX of the same paths (vector step, copy-loop instructions, bulk stores).
# Writes $OUT (default results-local): gluon_tests.log, gluon_bench.json, gluon_ptx.json, gluon_summary.txt; prints
# the summary last.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_DIR=${OUT:-results-local}
mkdir -p "$OUT_DIR"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" IRIS_TEST_SCALE=gpu
unset TRITON_INTERPRET
summary="$OUT_DIR/gluon_summary.txt"
echo "commit: $(git describe --always --dirty 2>/dev/null || echo unknown)" > "$summary"

IRIS_BACKEND=simulation timeout 55 python -m pytest -q tests/test_gluon.py > "$OUT_DIR/gluon_tests.log" 2>&1
echo "tests/test_gluon.py (simulation): $(tail -1 "$OUT_DIR/gluon_tests.log")" >> "$summary"

if [ $# -ge 1 ]; then
  timeout 150 bash scripts/upstream_gluon.sh "$1" >> "$OUT_DIR/gluon_tests.log" 2>&1
  echo "upstream Gluon tests (32 lanes): $(grep -E '^UPSTREAM' "$OUT_DIR/gluon_tests.log" | tail -3 | tr '\n' ' ')" \
    >> "$summary"
fi

bench="$OUT_DIR/bench.log"
IRIS_BACKEND=cuda timeout 50 python benchmarks/gluon_all_gather.py --world-size 1 --json "$OUT_DIR/ws1.json" \
  > "$bench" 2>&1
IRIS_BACKEND=simulation timeout 60 python benchmarks/gluon_all_gather.py --world-size 2 --json "$OUT_DIR/ws2.json" \
  >> "$bench" 2>&1
python - "$OUT_DIR" <<'PY'
import json, os, sys
out = sys.argv[1]
rows = []
for name in ("ws1.json", "ws2.json"):
    path = os.path.join(out, name)
    if os.path.exists(path):
        rows += json.load(open(path))
        os.remove(path)
json.dump(rows, open(os.path.join(out, "gluon_bench.json"), "w"), indent=1)
PY
grep -h "^SUMMARY\|Error" "$bench" >> "$summary"
{ echo "=== benchmarks/gluon_all_gather.py"; cat "$bench"; } >> "$OUT_DIR/gluon_tests.log" && rm -f "$bench"

(cd tests && IRIS_BACKEND=cuda timeout 25 python gluon_probe.py) 2>&1 | sed -n 's/^RESULT//p' > "$OUT_DIR/gluon_ptx.json"
python - "$OUT_DIR/gluon_ptx.json" >> "$summary" <<'PY'
import json, sys
try:
    ptx = json.load(open(sys.argv[1]))
except ValueError:
    print("PTX probe failed"); sys.exit()
for key in ("triton_all_gather", "gluon_all_gather", "gluon_all_gather_wide"):
    p = ptx[key]
    print(f"PTX {key:22s} copy-loop instructions {p['loop_instructions']:3d}, a thread's 16-byte vectors "
          f"{p['vector_step_bytes']:5d} bytes apart, st.global {p['st.global']}")
t = ptx["tma_all_gather"]
print(f"PTX tma_all_gather          bulk tensor stores {t['bulk_stores']} (4 members), st.global {t['st.global']}, "
      f"shared {t['shared_bytes']} B, full wait before release {t['full_wait_before_release']}, proxy fence first "
      f"{t['proxy_fence_before_first_store']}")
PY
echo "=== summary"
cat "$summary"
