#!/usr/bin/env bash
# The README's main job: installs packages, builds, makes the built-in demo
# model (random weights, byte vocabulary) if absent, and generates text.
# Usage: scripts/demo.sh [MODEL.gguf] [extra clusterkv-model generate flags]
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build --target clusterkv-model
MODEL=${1:-}
[ $# -gt 0 ] && shift
if [ -z "$MODEL" ]; then
  MODEL=build/demo/demo-model.gguf
  if [ ! -f "$MODEL" ]; then
    mkdir -p build/demo
    # The Llama-3 vocabulary makes random weights print words, not bytes.
    VOCAB=../shared/fixtures/tokenizer/ggml-vocab-llama-bpe.gguf
    [ -f "$VOCAB" ] || VOCAB=byte
    echo "demo: writing random-weight model $MODEL (vocab: $VOCAB)"
    build/model/clusterkv-model make-random --out "$MODEL" --layers 4 \
      --dim 512 --heads 8 --kv-heads 2 --ffn 1536 --dtype f16 --seed 7 \
      --vocab "$VOCAB"
  fi
fi
build/model/clusterkv-model info "$MODEL"
build/model/clusterkv-model generate "$MODEL" \
  --prompt "The clustered KV cache keeps long documents cheap." \
  --max-tokens 48 --temperature 0.8 --seed 3 "$@"
