#!/usr/bin/env bash
# Upstream Iris's Gluon tests and examples against this iris, with only the lane count changed:
#   bash scripts/upstream_gluon.sh UPSTREAM_CHECKOUT
# Upstream's Gluon unit tests hard-code 64-lane layouts (AMD wavefronts), which no NVIDIA GPU compiles ("Layout has
# 64 threads per warp, but the module specifies 32"). This copies them to a temporary folder, changes 64 lanes to
# 32 there and nothing else (BlockedLayout threads_per_warp [64] -> [32], "BLOCK_SIZE = 64  # ... wavefront" -> 32,
# threads_per_warp=64 -> 32, BLOCK_SIZE = 64 where a layout's lanes are BLOCK_SIZE -> 32), and runs:
#   unit      tests/unittests/test_*gluon*.py (lane count changed)
#   ccl       tests/ccl/test_*_gluon.py (lane count changed where any)
#   examples  the Gluon message-passing and all-gather-tracing examples (lane count changed)
# under the backend of the environment (without a GPU: the cpu backend, scripts/upstream_cuda_shim.py answering the
# files' torch.cuda calls and device="cuda" tensors on the CPU), at world size 1 unless WORLD_SIZE is set (then
# under torchrun). Prints one "UPSTREAM <part>: <pytest summary>" line per part, counted separately from the
# unchanged peer suite.
set -uo pipefail
src=${1:?usage: scripts/upstream_gluon.sh UPSTREAM_CHECKOUT}
# shellcheck source=scripts/upstream_harness.sh
source "$(dirname "$0")/upstream_harness.sh"
harness_init upstream-gluon

lanes32() {  # the one change: 64 lanes to 32
  sed -E -e 's/(BlockedLayout\(\[[^]]*\],[[:space:]]*)\[64\]/\1[32]/g' \
         -e 's/^([[:space:]]*BLOCK_SIZE[[:space:]]*=[[:space:]]*)64([[:space:]]*#.*[Ww]avefront.*)$/\132\2/' \
         -e 's/threads_per_warp[[:space:]]*=[[:space:]]*64/threads_per_warp=32/g' "$1" > "$2"
  # a layout whose lanes are BLOCK_SIZE (BlockedLayout([1], [BLOCK_SIZE], ...)): its BLOCK_SIZE = 64 is the lane count
  if grep -qE 'BlockedLayout\(\[1\],[[:space:]]*\[BLOCK_SIZE\]' "$2"; then
    sed -E -i 's/^([[:space:]]*BLOCK_SIZE[[:space:]]*=[[:space:]]*)64[[:space:]]*$/\132/' "$2"
  fi
  cmp -s "$1" "$2" || echo "changed lanes: ${1#$src/}"
}

shopt -s nullglob
run_part unit lanes32 "$src"/tests/unittests/test_*gluon*.py
run_part ccl lanes32 "$src"/tests/ccl/test_*_gluon.py

mkdir -p "$work/examples"
ok=0; total=0
for ex in "$src"/examples/*message_passing*/message_passing_gluon.py "$src"/examples/*gluon_all_gather_tracing*/*.py; do
  total=$((total + 1))
  copy="$work/examples/$(basename "$ex")"
  lanes32 "$ex" "$copy"
  if harness_run 300 "$copy" > "$copy.log" 2>&1; then ok=$((ok + 1)); else
    echo "example failed: ${ex#$src/}: $(grep -E 'Error|error' "$copy.log" | tail -1)"; fi
done
echo "UPSTREAM examples: $ok of $total ran to the end"
echo "logs: $work"
