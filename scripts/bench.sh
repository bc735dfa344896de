#!/usr/bin/env bash
# CPU engine benchmark: builds engine_bench, runs it with its default (full)
# settings -> bench/results/engine.json, then plots bench/results/engine.png.
# Run on a quiet machine (it takes minutes; other load skews the numbers).
# Usage: scripts/bench.sh [extra engine_bench flags, e.g. --threads 1]
# Env: BUILD_DIR (default build), PYTHON (an interpreter with matplotlib).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
OUT_DIR=bench/results
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD_DIR" --target engine_bench
mkdir -p "$OUT_DIR"
"$BUILD_DIR/bench/engine_bench" --work-dir "$OUT_DIR" \
  --out-json "$OUT_DIR/engine.json" "$@" | tee "$OUT_DIR/engine.txt"
for py in "${PYTHON:-}" python3 /usr/bin/python3; do
  if [ -n "$py" ] && "$py" -c 'import matplotlib' 2>/dev/null; then
    exec "$py" bench/plot_engine.py "$OUT_DIR/engine.json" \
      --out "$OUT_DIR/engine.png"
  fi
done
echo "bench.sh: no python3 with matplotlib (apt install python3-matplotlib);" \
  "results are in $OUT_DIR/engine.json" >&2
exit 1
