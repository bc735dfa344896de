#!/bin/sh
# Smoke test of cluster_bench (ctest cluster_bench_smoke):
#   cluster_smoke.sh CLUSTER_BENCH PLOT_CLUSTER_PY BUILD_DIR
# Runs a tiny configuration (keys at 1k, engine at 512 tokens with one layer,
# text: one short window of the trained demo model on its held-out text),
# plots the JSON, checks that the JSON and the four PNGs exist.
# Exits 77 (ctest: skipped) when no python3 with matplotlib is found.
set -eu
bench=$1
plot=$2
dir=$3/cluster_smoke
models=$(dirname "$plot")/../models
json="$dir/cluster.json"
mkdir -p "$dir"
rm -f "$json" "$dir"/*.png
"$bench" --quick --key-contexts 1024 --engine-contexts 512 --layers 1 \
  --batches 1,2 --timing-steps 4 --key-queries 2 --decode-steps 2 \
  --workloads keys,engine,text --text-model "$models/kjv-llama.gguf" \
  --text-file "$models/kjv-llama.heldout.txt" --text-prompt-tokens 512 \
  --text-decode-tokens 16 --text-windows 1 --text-budgets 64,1024 \
  --text-metric-budgets 64 --work-dir "$dir" --json "$json" \
  >"$dir/cluster.log" 2>&1 || { cat "$dir/cluster.log" >&2; exit 1; }
test -s "$json" || { echo "missing $json" >&2; exit 1; }
for py in "${PYTHON:-}" python3 /usr/bin/python3; do
  if [ -n "$py" ] && "$py" -c 'import matplotlib' 2>/dev/null; then
    "$py" "$plot" "$json" >/dev/null
    for png in recall_vs_budget step_time_vs_context overhead text_quality; do
      test -s "$dir/$png.png" || { echo "missing $dir/$png.png" >&2; exit 1; }
    done
    echo "ok: $json and 4 plots"
    exit 0
  fi
done
echo "no python3 with matplotlib: plots not checked" >&2
exit 77
