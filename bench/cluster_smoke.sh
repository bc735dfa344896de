#!/bin/sh
# Smoke test of cluster_bench (ctest cluster_bench_smoke):
#   cluster_smoke.sh CLUSTER_BENCH PLOT_CLUSTER_PY BUILD_DIR
# Runs a tiny configuration (keys at 1k, engine at 512 tokens with one layer,
# text: one short window of the trained demo model on its held-out text),
# plots the JSON, checks that the JSON and the four PNGs exist; then runs
# the engine twice with a saved-prefill folder (the second run must restore
# the prefill and decode identically).
# Fails when no python3 with matplotlib is found.
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
# Saved prefills: the second run restores the first run's prefill and
# decodes exactly the same (equal recall figures).
rm -rf "$dir/prefills"
for run in 1 2; do
  "$bench" --workloads engine --engine-contexts 512 --layers 1 --batches 1 \
    --decode-steps 2 --budgets 64 --engine-policies clusterkv \
    --engine-prefill-cache "$dir/prefills" --work-dir "$dir" \
    --json "$dir/reuse$run.json" >"$dir/reuse$run.log" 2>&1 ||
    { cat "$dir/reuse$run.log" >&2; exit 1; }
done
grep -q "restored from" "$dir/reuse2.log" ||
  { echo "second run did not restore the saved prefill" >&2; exit 1; }
recall() { grep "engine decode *clusterkv" "$1" | sed 's/ step .*//'; }
if [ -z "$(recall "$dir/reuse1.log")" ] ||
  [ "$(recall "$dir/reuse1.log")" != "$(recall "$dir/reuse2.log")" ]; then
  echo "restored prefill decoded differently:" >&2
  recall "$dir/reuse1.log" >&2; recall "$dir/reuse2.log" >&2; exit 1
fi
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
exit 1  # a missing fixture fails (scripts/setup.sh installs python3-matplotlib)
