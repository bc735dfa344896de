#!/usr/bin/env bash
# Long soak of clusterkv-server (the test suite's soak_30s, for longer):
# builds clusterkv-server and clusterkv_soak, starts the server on
# 127.0.0.1:0 with a random model, tight limits and --snapshot-dir, and runs
# 8 clients of random valid and invalid requests for SECONDS (default 600).
# Prints the summary (requests and errors by action, RPC and code, server
# RSS trend in MiB/hour, KV bytes back at baseline) and writes
# $OUT_DIR/soak_<SECONDS>s.json and .txt. Exit 1 when the soak fails.
# Usage: scripts/soak.sh [SECONDS] [extra clusterkv_soak flags...]
#        (e.g. --clients 16 --seed 7 --max-rss-growth-mb-per-hour 50)
# Env: BUILD_DIR (default build), OUT_DIR (default $BUILD_DIR/soak).
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_TO_RUN=${1:-600}
shift || true
BUILD_DIR=${BUILD_DIR:-build}
OUT_DIR=${OUT_DIR:-$BUILD_DIR/soak}
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD_DIR" --target clusterkv-server clusterkv_soak
mkdir -p "$OUT_DIR"
NAME="$OUT_DIR/soak_${SECONDS_TO_RUN}s"
"$BUILD_DIR/tests/soak/clusterkv_soak" --spawn \
  --server-binary "$BUILD_DIR/server/clusterkv-server" \
  --seconds "$SECONDS_TO_RUN" --clients 8 --snapshots \
  --json "$NAME.json" "$@" | tee "$NAME.txt"
