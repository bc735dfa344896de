#!/usr/bin/env bash
# The README's main job: set up and build if needed, make the built-in demo
# model (random weights: its answers are meaningless words), start
# clusterkv-server, prefill a long document once and ask several questions
# concurrently with `clusterkv qa`, show the metrics address, stop the server.
# Usage: scripts/demo.sh [MODEL.gguf] [DOCUMENT]
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target clusterkv-model clusterkv-server clusterkv

MODEL=${1:-}
DOC=${2:-/usr/share/common-licenses/GPL-3}
if [ -z "$MODEL" ]; then
  MODEL=build/demo/demo-model.gguf
  if [ ! -f "$MODEL" ]; then
    mkdir -p build/demo
    # The Llama-3 vocabulary makes random weights print words, not bytes.
    VOCAB=tests/fixtures/tokenizer/ggml-vocab-llama-bpe.gguf
    echo "demo: writing random-weight model $MODEL (vocab: $VOCAB)"
    build/model/clusterkv-model make-random --out "$MODEL" --layers 4 \
      --dim 512 --heads 8 --kv-heads 2 --ffn 1536 --dtype f16 --seed 7 \
      --vocab "$VOCAB"
  fi
  echo "demo: NOTE the demo model has random weights; its answers are" \
       "meaningless text. Pass a real GGUF model as the first argument."
fi
[ -f "$DOC" ] || { echo "demo: document $DOC not found" >&2; exit 1; }

METRICS=127.0.0.1:9464
LOG=build/demo/server.log
mkdir -p build/demo
build/server/clusterkv-server --model "$MODEL" --listen 127.0.0.1:0 \
  --metrics-address "$METRICS" --policy clusterkv --budget 1024 \
  >"$LOG" 2>&1 &
SERVER=$!
trap 'kill -TERM $SERVER 2>/dev/null; wait $SERVER 2>/dev/null || true' EXIT
# The server picks a free port and logs "listening on HOST:PORT".
ADDR=""
for _ in $(seq 1 300); do
  ADDR=$(grep -oE 'listening on [0-9.:]+' "$LOG" | head -n1 | cut -d' ' -f3 || true)
  [ -n "$ADDR" ] && break
  kill -0 $SERVER 2>/dev/null || { cat "$LOG"; exit 1; }
  sleep 0.1
done
[ -n "$ADDR" ] || { echo "demo: server did not start" >&2; cat "$LOG"; exit 1; }
CLIENT=(build/client/clusterkv --server "$ADDR")
for _ in $(seq 1 300); do
  "${CLIENT[@]}" health >/dev/null 2>&1 && break
  kill -0 $SERVER 2>/dev/null || { cat "$LOG"; exit 1; }
  sleep 0.1
done
"${CLIENT[@]}" info
echo "demo: metrics at http://$METRICS/metrics"
"${CLIENT[@]}" qa --doc "$DOC" --max-tokens 40 --temperature 0.7 --seed 1 \
  --question "What does this license allow?" \
  --question "Who may distribute copies?" \
  --question "What must accompany object code?"
echo "demo: server metrics (excerpt):"
curl -s "http://$METRICS/metrics" 2>/dev/null | grep -E \
  '^clusterkv_(prompt|generated)_tokens_total|^clusterkv_requests_total' \
  | head -n 12 || true
kill -TERM $SERVER
wait $SERVER && echo "demo: server drained and stopped"
trap - EXIT
