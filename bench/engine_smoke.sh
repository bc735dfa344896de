#!/bin/sh
# Smoke test of engine_bench (ctest engine_bench_smoke):
#   engine_smoke.sh ENGINE_BENCH PLOT_ENGINE_PY BUILD_DIR POOL_AB_BENCH
#                   PLOT_POOL_AB_PY
# Runs `engine_bench --quick`, checks that decode tok/s is 1 / mean step with
# median, p90, p99 and max beside it; a second run under --background-load
# 0.5 must report the load it got. Plots the JSON, checks that both files
# exist. pool_ab_bench then runs both pool schedules on the quick model (it
# fails when their logits differ) and its JSON is plotted. Fails when no
# python3 with matplotlib is found.
set -eu
bench=$1
plot=$2
dir=$3
pool_ab=$4
plot_pool_ab=$5
pool_json="$dir/pool_ab_smoke.json"
json="$dir/engine_smoke.json"
png="$dir/engine_smoke.png"
loaded="$dir/engine_smoke_loaded.json"
rm -f "$json" "$png" "$loaded" "$pool_json" "$dir/pool_ab_smoke.png"
"$bench" --quick --work-dir "$dir/engine_smoke_work" --out-json "$json" \
  >/dev/null
test -s "$json" || { echo "missing $json" >&2; exit 1; }
"$bench" --quick --threads 2 --depths 0 --decode-tokens 16 \
  --background-load 0.5 --background-period-ms 5 \
  --work-dir "$dir/engine_smoke_work" --out-json "$loaded" >/dev/null
test -s "$loaded" || { echo "missing $loaded" >&2; exit 1; }
model=$(ls "$dir"/engine_smoke_work/random-2x64-*.gguf | head -1)
"$pool_ab" --model "$model" --threads 2 --steps 8 --out-json "$pool_json" \
  >/dev/null
test -s "$pool_json" || { echo "missing $pool_json" >&2; exit 1; }
check_fields() {
  "$1" - "$json" "$loaded" <<'PY'
import json, sys
for path in sys.argv[1:]:
    data = json.load(open(path))
    for run in data["runs"]:
        for dep in run["depths"]:
            d = dep["decode"]
            ms = sorted(d["step_ms"])
            assert len(ms) == d["tokens"] > 0, path
            mean = sum(ms) / len(ms)
            assert abs(d["mean_ms"] - mean) <= 1e-9 * mean, (path, d)
            assert abs(d["tok_per_s"] * d["mean_ms"] - 1e3) < 1e-6, (path, d)
            assert abs(d["max_ms"] - ms[-1]) <= 1e-12, (path, d)
            assert ms[0] <= d["median_ms"] <= d["p90_ms"] <= d["p99_ms"] \
                <= d["max_ms"], (path, d)
            assert d["run_delay_ms_per_step"] >= 0, (path, d)
load = json.load(open(sys.argv[2]))["config"]["background_load"]
assert load["fraction"] == 0.5, load
# The load process ran: it got a visible share of a core.
assert 0.05 < load["measured_core_share"] <= 1.05, load
PY
}
for py in "${PYTHON:-}" python3 /usr/bin/python3; do
  if [ -n "$py" ] && "$py" -c 'import matplotlib' 2>/dev/null; then
    check_fields "$py"
    "$py" "$plot" "$json"
    test -s "$png" || { echo "missing $png" >&2; exit 1; }
    "$py" "$plot_pool_ab" "$pool_json"
    test -s "$dir/pool_ab_smoke.png" || { echo "missing pool_ab png" >&2; exit 1; }
    echo "ok: $json $png"
    exit 0
  fi
done
echo "no python3 with matplotlib: fields and plot not checked" >&2
exit 1  # a missing fixture fails (scripts/setup.sh installs python3-matplotlib)
