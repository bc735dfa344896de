#!/usr/bin/env bash
# CPU benchmarks: builds engine_bench, cluster_bench and service_bench, runs
# them with their default (full) settings -> bench/results/engine.json (+
# engine.png), bench/results/cluster.json (+ recall_vs_budget.png,
# step_time_vs_context.png, overhead.png, text_quality.png) and bench/results/service.json (+
# service.png; the in-process server's request log goes to service.log).
# Run on a quiet machine: engine_bench takes minutes, cluster_bench's keys and
# engine workloads about 20 minutes and its text workload (31 policy x budget
# configurations over 16,384 held-out tokens) about 1.5 hours on one core,
# service_bench about 3 minutes on 2 cores (other load skews the numbers).
# Usage: scripts/bench.sh [extra engine_bench flags, e.g. --threads 1]
# Env: BUILD_DIR (default build), PYTHON (an interpreter with matplotlib),
#      CLUSTER_BENCH_FLAGS (extra cluster_bench flags, e.g. --quick),
#      SERVICE_BENCH_FLAGS (extra service_bench flags, e.g. --rounds 9),
#      SKIP_ENGINE_BENCH=1 / SKIP_CLUSTER_BENCH=1 / SKIP_SERVICE_BENCH=1 /
#      SKIP_MATVEC_BENCH=1 (matvec_bench: decode GEMV per weight type vs F16
#      -> bench/results/matvec.json + matvec.png, about a minute) /
#      SKIP_STALL_BENCH=1 (stall_bench: a decoding session's longest gap
#      while a 32k-token session is snapshotted and a 32k-token text is
#      prefilled -> bench/results/stall.json + stall.png, a few minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build}
OUT_DIR=bench/results
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD_DIR" --target engine_bench cluster_bench \
  service_bench matvec_bench stall_bench
mkdir -p "$OUT_DIR"
PY=
for py in "${PYTHON:-}" python3 /usr/bin/python3; do
  if [ -n "$py" ] && "$py" -c 'import matplotlib' 2>/dev/null; then
    PY=$py
    break
  fi
done
if [ "${SKIP_ENGINE_BENCH:-0}" != 1 ]; then
  "$BUILD_DIR/bench/engine_bench" --work-dir "$OUT_DIR" \
    --out-json "$OUT_DIR/engine.json" "$@" | tee "$OUT_DIR/engine.txt"
  if [ -n "$PY" ]; then
    "$PY" bench/plot_engine.py "$OUT_DIR/engine.json" \
      --out "$OUT_DIR/engine.png"
  fi
fi
if [ "${SKIP_MATVEC_BENCH:-0}" != 1 ]; then
  "$BUILD_DIR/bench/matvec_bench" --threads 1,2 \
    --out-json "$OUT_DIR/matvec.json" | tee "$OUT_DIR/matvec.txt"
  if [ -n "$PY" ]; then
    "$PY" bench/plot_matvec.py "$OUT_DIR/matvec.json"
  fi
fi
if [ "${SKIP_CLUSTER_BENCH:-0}" != 1 ]; then
  # shellcheck disable=SC2086  # CLUSTER_BENCH_FLAGS is a list of flags
  # text: the trained demo model on its held-out text (models/).
  "$BUILD_DIR/bench/cluster_bench" --work-dir "$OUT_DIR" \
    --workloads keys,engine,text --json "$OUT_DIR/cluster.json" \
    ${CLUSTER_BENCH_FLAGS:-} |
    tee "$OUT_DIR/cluster.txt"
  if [ -n "$PY" ]; then
    "$PY" bench/plot_cluster.py "$OUT_DIR/cluster.json"
  fi
fi
if [ "${SKIP_SERVICE_BENCH:-0}" != 1 ]; then
  # shellcheck disable=SC2086  # SERVICE_BENCH_FLAGS is a list of flags
  if ! "$BUILD_DIR/bench/service_bench" --work-dir "$OUT_DIR" \
    --out-json "$OUT_DIR/service.json" ${SERVICE_BENCH_FLAGS:-} \
    2>"$OUT_DIR/service.log" | tee "$OUT_DIR/service.txt"; then
    tail -n 20 "$OUT_DIR/service.log" >&2
    exit 1
  fi
  if [ -n "$PY" ]; then
    "$PY" bench/plot_service.py "$OUT_DIR/service.json"
  fi
fi
if [ "${SKIP_STALL_BENCH:-0}" != 1 ]; then
  if ! "$BUILD_DIR/bench/stall_bench" --work-dir "$OUT_DIR" \
    --out-json "$OUT_DIR/stall.json" 2>"$OUT_DIR/stall.log" |
    tee "$OUT_DIR/stall.txt"; then
    tail -n 20 "$OUT_DIR/stall.log" >&2
    exit 1
  fi
  if [ -n "$PY" ]; then
    "$PY" bench/plot_stall.py "$OUT_DIR/stall.json"
  fi
fi
if [ -z "$PY" ]; then
  echo "bench.sh: no python3 with matplotlib (apt install" \
    "python3-matplotlib); results are in $OUT_DIR/*.json" >&2
  exit 1
fi
