#!/usr/bin/env bash
# The site's screenshots in docs/img (the index and the fused-GEMM tutorial), as headless Chromium renders them:
#   bash scripts/site_screenshots.sh        # needs the docs extra and Chromium (Debian: apt-get install chromium)
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(mktemp -d)
IRIS_BACKEND=cpu python3 -m sphinx -W -q -b html docs "$out"
shoot() {  # page, image
  chromium --headless --no-sandbox --disable-gpu --disable-dev-shm-usage --allow-file-access-from-files \
    --virtual-time-budget=8000 --window-size=1280,1000 --hide-scrollbars --screenshot="$2" "file://$out/$1"
}
shoot index.html docs/img/site_index.png
shoot tutorials/04_fused_gemm.html docs/img/site_tutorial.png
rm -rf "$out"
ls -l docs/img/site_*.png
