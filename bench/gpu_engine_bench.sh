#!/usr/bin/env bash
# The GPU engine benchmark (issue 29 §3): cluster_bench's engine workload on
# the CUDA backend with the Llama-3-8B shape (d 4096, 32/8 heads of 128,
# ffn 14336), 8 layers of which 2 dense, BF16 weights, byte vocabulary;
# sessions of 32k and 128k tokens built from synthetic clustered keys
# (--engine_synthetic: no prefill; k-means on the device), batch 1 and 8
# (forks of one session); one process per mode: clusterkv with KV resident
# on the device, clusterkv offloaded (pinned host KV, selected clusters
# recalled per step), per query head and per KV head; the full policy is
# the baseline of every process. Each process writes its JSON; then
# bench/plot_gpu_engine.py prints one table (step ms, tokens/s, attention
# ms, selection ms, H2D MB per step, hit rate, device GB, estimated HBM
# GB/s of the sparse attention, clusterkv/full throughput) and writes
# gpu_engine.json + gpu_engine.png.
#
# usage: bench/gpu_engine_bench.sh CLUSTER_BENCH OUT_DIR [--dry-run|--quick]
#   --dry-run  the fake device, a tiny shape, 1k context, batch 1 and 2
#              (runs anywhere in seconds: the ctest gpu_engine_bench_dry_run)
#   --quick    32k only, per query head only
set -uo pipefail
BIN="${1:?usage: gpu_engine_bench.sh CLUSTER_BENCH OUT_DIR [--dry-run|--quick]}"
OUT="${2:?usage: gpu_engine_bench.sh CLUSTER_BENCH OUT_DIR [--dry-run|--quick]}"
MODE="${3:-}"
HERE="$(cd "$(dirname "$0")" && pwd)"
mkdir -p "$OUT"

backend=cuda
shape=(--layers 8 --dense_layers 2 --ffn 14336 --weight_type bf16)
contexts=32768,131072
batches=1,8
steps=8
gqas=(per_query_head per_kv_head)
case "$MODE" in
  --dry-run)
    backend=fake
    shape=(--layers 3 --dense_layers 1 --ffn 256 --weight_type bf16)
    contexts=1024
    batches=1,2
    steps=3
    gqas=(per_query_head) ;;
  --quick)
    contexts=32768
    gqas=(per_query_head) ;;
  "") ;;
  *) echo "unknown option $MODE" >&2; exit 2 ;;
esac

status=0
runs=()
for residency in device offload; do
  for gqa in "${gqas[@]}"; do
    name="gpu_engine_${residency}_${gqa}"
    echo "== $name" >&2
    "$BIN" --workloads engine --backend "$backend" "${shape[@]}" \
      --engine_synthetic --engine_contexts "$contexts" --batches "$batches" \
      --budgets 1024 --engine_policies clusterkv --decode_steps "$steps" \
      --engine_quality=false --kv_residency "$residency" \
      --gqa_selection "$gqa" --json "$OUT/$name.json" --work_dir "$OUT" \
      > "$OUT/$name.log" 2>&1
    rc=$?
    if [ "$rc" -ne 0 ]; then
      echo "$name failed (exit $rc); last lines:" >&2
      tail -5 "$OUT/$name.log" >&2
      status=1
      continue
    fi
    runs+=("$OUT/$name.json")
  done
done
# The Debian python3 here (python3-matplotlib), the PyTorch one on the
# device machine (PATH): whichever has matplotlib, else the first.
PY=python3
for p in /usr/bin/python3 python3; do
  if "$p" -c "import matplotlib" 2>/dev/null; then PY="$p"; break; fi
done
if [ "${#runs[@]}" -gt 0 ]; then
  "$PY" "$HERE/plot_gpu_engine.py" --out "$OUT/gpu_engine" "${runs[@]}" ||
    status=1
else
  status=1
fi
exit "$status"
