#!/usr/bin/env bash
# Gluon on one H200, in about two minutes:
#   bash scripts/gpu_gluon.sh [UPSTREAM_CHECKOUT]
# 1. tests/test_gluon.py at GPU sizes, its ranks sharing the GPU (IRIS_BACKEND=simulation);
# 2. with an upstream Iris checkout given, its Gluon unit tests with the lane count changed (scripts/upstream_gluon.sh);
# 3. benchmarks/gluon_all_gather.py: Gluon against Triton all_gather, bandwidth by program count and the SMs each
#    needs for 90% of the copy ceiling, at world size 1 and with 2 ranks sharing the GPU;
# 4. tests/gluon_probe.py: the PTX of the same remote store from Gluon and from Triton.
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

IRIS_BACKEND=simulation timeout 120 python -m pytest -q tests/test_gluon.py > "$OUT_DIR/gluon_tests.log" 2>&1
echo "tests/test_gluon.py (simulation): $(tail -1 "$OUT_DIR/gluon_tests.log")" >> "$summary"

if [ $# -ge 1 ]; then
  timeout 150 bash scripts/upstream_gluon.sh "$1" >> "$OUT_DIR/gluon_tests.log" 2>&1
  echo "upstream Gluon tests (32 lanes): $(grep -E '^UPSTREAM' "$OUT_DIR/gluon_tests.log" | tail -3 | tr '\n' ' ')" \
    >> "$summary"
fi

IRIS_BACKEND=cuda timeout 120 python benchmarks/gluon_all_gather.py --world-size 1 --json "$OUT_DIR/ws1.json" \
  > "$OUT_DIR/bench_ws1.log" 2>&1
IRIS_BACKEND=simulation timeout 120 python benchmarks/gluon_all_gather.py --world-size 2 --json "$OUT_DIR/ws2.json" \
  > "$OUT_DIR/bench_ws2.log" 2>&1
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
cat "$OUT_DIR/bench_ws1.log" "$OUT_DIR/bench_ws2.log" > "$OUT_DIR/gluon_bench.log"; rm -f "$OUT_DIR"/bench_ws*.log
grep -h "^SUMMARY\|Error" "$OUT_DIR/gluon_bench.log" >> "$summary"
mv "$OUT_DIR/gluon_bench.log" "$OUT_DIR/gluon_tests.log.bench" 2>/dev/null && cat "$OUT_DIR/gluon_tests.log.bench" \
  >> "$OUT_DIR/gluon_tests.log" && rm -f "$OUT_DIR/gluon_tests.log.bench"

(cd tests && IRIS_BACKEND=cuda timeout 120 python gluon_probe.py) 2>&1 | sed -n 's/^RESULT//p' > "$OUT_DIR/gluon_ptx.json"
python - "$OUT_DIR/gluon_ptx.json" >> "$summary" <<'PY'
import json, sys
try:
    ptx = json.load(open(sys.argv[1]))
except ValueError:
    print("PTX probe failed"); sys.exit()
for key in ("gluon_store/16", "triton_store/16", "gluon_store/None", "triton_store/None"):
    print(f"PTX {key:18s} st.global per thread {ptx[key]['st.global']:2d}  "
          f"{[o for o in ptx[key]['ops'] if o.startswith(('st.global', 'atom'))]} fences {ptx[key]['fences']}")
PY
echo "=== summary"
cat "$summary"
