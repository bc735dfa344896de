#!/bin/sh
# Smoke test of a gRPC benchmark (ctest service_bench_smoke, stall_bench_smoke):
#   service_smoke.sh BENCH PLOT_PY BUILD_DIR [NAME]
# Runs `BENCH --quick` (its server's request log goes to BUILD_DIR/NAME.log,
# shown on failure), plots the JSON, checks that both files exist. NAME
# defaults to service_smoke.
# Fails when no python3 with matplotlib is found.
set -eu
bench=$1
plot=$2
dir=$3
name=${4:-service_smoke}
json="$dir/$name.json"
png="$dir/$name.png"
log="$dir/$name.log"
rm -f "$json" "$png"
"$bench" --quick --work-dir "$dir/${name}_work" --out-json "$json" \
  >/dev/null 2>"$log" || { cat "$log" >&2; exit 1; }
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
exit 1  # a missing fixture fails (scripts/setup.sh installs python3-matplotlib)
