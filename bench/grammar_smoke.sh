#!/bin/sh
# Smoke test of grammar_bench (ctest grammar_bench_smoke):
#   grammar_smoke.sh GRAMMAR_BENCH PLOT_GRAMMAR_PY BUILD_DIR
# Runs `grammar_bench --quick`, plots the JSON, checks that both files exist
# and that the JSON holds a mask time and a decode step.
# Fails when no python3 with matplotlib is found.
set -eu
bench=$1
plot=$2
dir=$3
json="$dir/grammar_smoke.json"
png="$dir/grammar_smoke.png"
rm -f "$json" "$png"
"$bench" --quick --out_json "$json" 2>/dev/null
test -s "$json" || { echo "missing $json" >&2; exit 1; }
grep -q '"mask_share_of_decode_step"' "$json" ||
  { echo "no mask share in $json" >&2; exit 1; }
for py in "${PYTHON:-}" python3 /usr/bin/python3; do
  if [ -n "$py" ] && "$py" -c 'import matplotlib' 2>/dev/null; then
    "$py" "$plot" "$json"
    test -s "$png" || { echo "missing $png" >&2; exit 1; }
    echo "ok: $json $png"
    exit 0
  fi
done
echo "no python3 with matplotlib: plot not checked" >&2
exit 1  # a missing fixture fails (scripts/setup.sh installs python3-matplotlib)
