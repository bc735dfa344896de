#!/bin/sh
# Smoke test of engine_bench (ctest engine_bench_smoke):
#   engine_smoke.sh ENGINE_BENCH PLOT_ENGINE_PY BUILD_DIR
# Runs `engine_bench --quick`, plots the JSON, checks that both files exist.
# Exits 77 (ctest: skipped) when no python3 with matplotlib is found.
set -eu
bench=$1
plot=$2
dir=$3
json="$dir/engine_smoke.json"
png="$dir/engine_smoke.png"
rm -f "$json" "$png"
"$bench" --quick --work-dir "$dir/engine_smoke_work" --out-json "$json" \
  >/dev/null
test -s "$json" || { echo "missing $json" >&2; exit 1; }
for py in "${PYTHON:-}" python3 /usr/bin/python3; do
  if [ -n "$py" ] && "$py" -c 'import matplotlib' 2>/dev/null; then
    "$py" "$plot" "$json"
    test -s "$png" || { echo "missing $png" >&2; exit 1; }
    echo "ok: $json $png"
    exit 0
  fi
done
echo "no python3 with matplotlib: plot not checked" >&2
exit 77
