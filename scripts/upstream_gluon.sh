#!/usr/bin/env bash
# Upstream Iris's Gluon tests and examples against this iris, with only the lane count changed:
#   bash scripts/upstream_gluon.sh UPSTREAM_CHECKOUT
# Upstream's Gluon unit tests hard-code 64-lane layouts (AMD wavefronts), which no NVIDIA GPU compiles ("Layout has
# 64 threads per warp, but the module specifies 32"). This copies them to a temporary folder, changes 64 lanes to
# 32 there and nothing else (BlockedLayout threads_per_warp [64] -> [32], "BLOCK_SIZE = 64  # ... wavefront" -> 32,
# threads_per_warp=64 -> 32), and runs:
#   unit      tests/unittests/test_*gluon*.py (lane count changed)
#   ccl       tests/ccl/test_*_gluon.py (lane count changed where any)
#   examples  the Gluon message-passing and all-gather-tracing examples (lane count changed)
# under the backend of the environment (without a GPU: the cpu backend, with a harness conftest that makes upstream's
# device="cuda" reference tensors on the CPU), at world size 1 unless WORLD_SIZE is set (then under torchrun). Prints one
# "UPSTREAM <part>: <pytest summary>" line per part, counted separately from the unchanged peer suite.
set -uo pipefail
src=${1:?usage: scripts/upstream_gluon.sh UPSTREAM_CHECKOUT}
here=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d /tmp/upstream-gluon-XXXX)
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
world=${WORLD_SIZE:-1}
# upstream's tests import triton before iris: without a GPU the interpreter must be on from the start
command -v nvidia-smi > /dev/null && nvidia-smi -L > /dev/null 2>&1 || export TRITON_INTERPRET=1

lanes32() {  # the one change: 64 lanes to 32
  sed -E -e 's/(BlockedLayout\(\[[^]]*\],[[:space:]]*)\[64\]/\1[32]/g' \
         -e 's/^([[:space:]]*BLOCK_SIZE[[:space:]]*=[[:space:]]*)64([[:space:]]*#.*[Ww]avefront.*)$/\132\2/' \
         -e 's/threads_per_warp[[:space:]]*=[[:space:]]*64/threads_per_warp=32/g' "$1" > "$2"
  cmp -s "$1" "$2" || echo "changed lanes: ${1#$src/}"
}

harness_conftest() {  # the environment, not upstream's code: without a GPU, device="cuda" tensors are made on the CPU
  cat <<'PY'
import functools

import torch

if not torch.cuda.is_available():
    def _on_cpu(fn):
        @functools.wraps(fn)
        def made(*args, **kwargs):
            if str(kwargs.get("device", "")).startswith("cuda"):
                kwargs["device"] = "cpu"
            return fn(*args, **kwargs)
        return made

    for _name in ("ones", "zeros", "full", "empty", "tensor", "arange", "randn", "rand", "randint", "ones_like",
                  "zeros_like", "full_like", "empty_like"):
        setattr(torch, _name, _on_cpu(getattr(torch, _name)))
PY
}

run_part() {  # part, files...
  local part=$1; shift
  [ $# -eq 0 ] && { echo "UPSTREAM $part: no files in $src"; return; }
  mkdir -p "$work/$part"
  for f in "$@"; do lanes32 "$f" "$work/$part/$(basename "$f")"; done
  harness_conftest > "$work/$part/conftest.py"
  local log="$work/$part.log"
  if [ "$world" -gt 1 ]; then
    (cd "$work/$part" && timeout 600 torchrun --nproc-per-node="$world" -m pytest -q -p no:cacheprovider . ) > "$log" 2>&1
  else
    (cd "$work/$part" && RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$((29500 + RANDOM % 1000)) \
      timeout 600 python -m pytest -q -p no:cacheprovider . ) > "$log" 2>&1
  fi
  echo "UPSTREAM $part: $(grep -E '(passed|failed|error)' "$log" | tail -1)"
}

shopt -s nullglob
run_part unit "$src"/tests/unittests/test_*gluon*.py
run_part ccl "$src"/tests/ccl/test_*_gluon.py

mkdir -p "$work/examples"
ok=0; total=0
for ex in "$src"/examples/*message_passing*/message_passing_gluon.py "$src"/examples/*gluon_all_gather_tracing*/*.py; do
  total=$((total + 1))
  lanes32 "$ex" "$work/examples/$(basename "$ex")"
  if [ "$world" -gt 1 ]; then
    cmd=(torchrun --nproc-per-node="$world" "$work/examples/$(basename "$ex")")
  else
    cmd=(env RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$((29500 + RANDOM % 1000)) \
         python "$work/examples/$(basename "$ex")")
  fi
  if timeout 300 "${cmd[@]}" > "$work/examples/$(basename "$ex").log" 2>&1; then ok=$((ok + 1)); else
    echo "example failed: ${ex#$src/}: $(grep -E 'Error|error' "$work/examples/$(basename "$ex").log" | tail -1)"; fi
done
echo "UPSTREAM examples: $ok of $total ran to the end"
echo "logs: $work"
