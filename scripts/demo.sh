#!/usr/bin/env bash
# The README's main job: set up and build if needed, start clusterkv-server
# on the built-in demo model, prefill a long document once and continue it
# several ways concurrently with `clusterkv qa` (forks of one prefill), show
# the metrics address, stop the server.
# The demo model (models/kjv-llama.gguf) is the project's own small model
# with real attention, trained on the King James Bible by scripts/train/:
# it continues text in that style (it is not instruction-tuned).
# Usage: scripts/demo.sh [--random] [MODEL.gguf] [DOCUMENT]
#   --random: a random-weight model instead (meaningless words)
set -euo pipefail
cd "$(dirname "$0")/.."
RANDOM_MODEL=0
if [ "${1:-}" = "--random" ]; then
  RANDOM_MODEL=1
  shift
fi
./scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target clusterkv-model clusterkv-server clusterkv

MODEL=${1:-}
DOC=${2:-}
# Continuations of the document, asked concurrently through forks.
PROMPTS=("And I saw" "Blessed are they that" "And the angel said unto me,")
if [ -z "$MODEL" ] && [ "$RANDOM_MODEL" = 1 ]; then
  MODEL=build/demo/demo-model.gguf
  DOC=${DOC:-/usr/share/common-licenses/GPL-3}
  PROMPTS=("What does this license allow?" "Who may distribute copies?"
           "What must accompany object code?")
  if [ ! -f "$MODEL" ]; then
    mkdir -p build/demo
    # The Llama-3 vocabulary makes random weights print words, not bytes.
    VOCAB=tests/fixtures/tokenizer/ggml-vocab-llama-bpe.gguf
    echo "demo: writing random-weight model $MODEL (vocab: $VOCAB)"
    build/model/clusterkv-model make-random --out "$MODEL" --layers 4 \
      --dim 512 --heads 8 --kv-heads 2 --ffn 1536 --dtype f16 --seed 7 \
      --vocab "$VOCAB"
  fi
  echo "demo: NOTE the --random model has random weights; its answers are" \
       "meaningless text."
elif [ -z "$MODEL" ]; then
  MODEL=models/kjv-llama.gguf
  DOC=${DOC:-models/demo-document.txt}
  echo "demo: model $MODEL: 4 layers trained on the King James Bible" \
       "(scripts/train/); it continues the document in that style."
fi
DOC=${DOC:-/usr/share/common-licenses/GPL-3}
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
QUESTIONS=()
for p in "${PROMPTS[@]}"; do QUESTIONS+=(--question "$p"); done
"${CLIENT[@]}" qa --doc "$DOC" --max-tokens 40 --temperature 0.7 --seed 1 \
  "${QUESTIONS[@]}"
echo "demo: server metrics (excerpt):"
curl -s "http://$METRICS/metrics" 2>/dev/null | grep -E \
  '^clusterkv_(prompt|generated)_tokens_total|^clusterkv_requests_total' \
  | head -n 12 || true
kill -TERM $SERVER
wait $SERVER && echo "demo: server drained and stopped"
trap - EXIT
