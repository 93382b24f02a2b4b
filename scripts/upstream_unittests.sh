#!/usr/bin/env bash
# Upstream Iris's unit tests of the user API, unchanged, against this iris:
#   [WORLD_SIZE=2] bash scripts/upstream_unittests.sh UPSTREAM_CHECKOUT
# Runs every tests/unittests/test_*.py of the checkout but the Gluon ones (scripts/upstream_gluon.sh, with their lane
# count changed) and those that test upstream's own internals (they import iris.drivers, iris.host.platform or
# iris.host.distributed: HIP, dmabuf, ROCr and VMM probes, its topology discovery), under torchrun at WORLD_SIZE ranks
# (default 1), on the backend of the environment (without a GPU: the cpu backend; scripts/upstream_harness.sh).
# Prints "UPSTREAM peer: <pytest summary>" and the files it left out.
set -uo pipefail
src=${1:?usage: scripts/upstream_unittests.sh UPSTREAM_CHECKOUT}
# shellcheck source=scripts/upstream_harness.sh
source "$(dirname "$0")/upstream_harness.sh"
harness_init upstream-unittests

files=(); internal=()
for f in "$src"/tests/unittests/test_*.py; do
  case $(basename "$f") in *gluon*) continue ;; esac
  if grep -qE '(from|import) iris\.(drivers|host\.platform|host\.distributed)' "$f"; then
    internal+=("$(basename "$f")")
  else
    files+=("$f")
  fi
done
UPSTREAM_TIMEOUT_S=${UPSTREAM_TIMEOUT_S:-3000} run_part peer cp "${files[@]}"
echo "left out (upstream's internals): ${internal[*]}"
echo "log: $work/peer.log"
