#!/usr/bin/env bash
# Runs every libFuzzer binary (*_fuzzer) in a folder for a fixed number of
# executions, each from a fresh temporary corpus, and prints one summary line
# per fuzzer.
#
# Usage: scripts/fuzz.sh --bin-dir DIR --runs N [--target NAME] [--seed S]
#                        [--max-time SECS] [--fixtures DIR] [--max-len BYTES]
#   --bin-dir   folder holding the fuzzers (e.g. build/fuzz/tests/fuzz)
#   --runs      executions per fuzzer (-runs=N)
#   --target    run only this fuzzer
#   --max-time  stop a fuzzer after SECS seconds even if N runs are not done
#   --seed      libFuzzer random seed (default: random)
#   --fixtures  fixtures folder (default: tests/fixtures)
#   --max-len   largest input libFuzzer builds (default 65536)
#
# Seeds: a fuzzer may write its own seeds into $CLUSTERKV_FUZZ_SEED_DIR from
# LLVMFuzzerInitialize (the script sets it to the corpus folder). Fixture
# files are added where relevant: the first 64 KiB of each fixture GGUF for
# gguf* fuzzers, the tokenizer test strings for *tokenizer* fuzzers, the chat
# templates (with a short conversation) for *chat* fuzzers; every fuzzer also
# gets its committed seeds from tests/fuzz/corpus/NAME/.
#
# Exit status: 0 when every fuzzer ran N executions without a crash, leak,
# timeout or out-of-memory; 1 otherwise (the log and crashing input are kept
# and their paths printed); 2 on a usage error.
set -euo pipefail

usage() { sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

bin_dir="" runs="" target="" seed="" max_time="" max_len=65536
fixtures="$(cd "$(dirname "$0")/.." && pwd)/tests/fixtures"
while [[ $# -gt 0 ]]; do
  case "$1" in
    --bin-dir) bin_dir="${2:-}"; shift 2 ;;
    --runs) runs="${2:-}"; shift 2 ;;
    --target) target="${2:-}"; shift 2 ;;
    --seed) seed="${2:-}"; shift 2 ;;
    --max-time) max_time="${2:-}"; shift 2 ;;
    --fixtures) fixtures="${2:-}"; shift 2 ;;
    --max-len) max_len="${2:-}"; shift 2 ;;
    -h|--help) usage ;;
    *) echo "fuzz.sh: unknown argument '$1'" >&2; usage ;;
  esac
done
[[ -n "$bin_dir" && -n "$runs" ]] || usage
[[ "$runs" =~ ^[0-9]+$ ]] || { echo "fuzz.sh: --runs needs a number" >&2; exit 2; }
[[ -d "$bin_dir" ]] || { echo "fuzz.sh: no folder '$bin_dir'" >&2; exit 2; }

fuzzers=()
for f in "$bin_dir"/*_fuzzer; do
  [[ -f "$f" && -x "$f" ]] || continue
  if [[ -z "$target" || "$(basename "$f")" == "$target" ]]; then
    fuzzers+=("$f")
  fi
done
if [[ ${#fuzzers[@]} -eq 0 ]]; then
  echo "fuzz.sh: no ${target:-*_fuzzer} binary in '$bin_dir'" >&2
  exit 1
fi

# Adds fixture files relevant to fuzzer $1 to corpus folder $2, and the
# fuzzer's committed seeds (tests/fuzz/corpus/NAME/).
add_fixture_seeds() {
  local name="$1" corpus="$2" f
  local committed
  committed="$(cd "$(dirname "$0")/.." && pwd)/tests/fuzz/corpus/$name"
  if [[ -d "$committed" ]]; then
    for f in "$committed"/*; do
      [[ -f "$f" ]] && cp "$f" "$corpus/seed_$(basename "$f")"
    done
  fi
  [[ -d "$fixtures" ]] || return 0
  case "$name" in
    gguf*)
      for f in "$fixtures"/models/*.gguf "$fixtures"/tokenizer/*.gguf; do
        [[ -f "$f" ]] && head -c 65536 "$f" > "$corpus/fixture_$(basename "$f")"
      done ;;
    *tokenizer*)
      for f in "$fixtures"/tokenizer/*.inp; do
        [[ -f "$f" ]] && cp "$f" "$corpus/fixture_$(basename "$f")"
      done ;;
    *chat*)
      # flags byte, template, NUL, messages as "role\x01content\x02...".
      for f in "$fixtures"/chat/*.jinja; do
        [[ -f "$f" ]] || continue
        { printf '\x07'; cat "$f"; printf '\0system\001Be brief.\002user\001Hi\002assistant\001Yo\002user\001\xc3\xbc?'; } \
          > "$corpus/fixture_$(basename "$f")"
      done ;;
  esac
  return 0
}

work="$(mktemp -d "${TMPDIR:-/tmp}/clusterkv-fuzz.XXXXXX")"
failed=0
for bin in "${fuzzers[@]}"; do
  name="$(basename "$bin")"
  corpus="$work/$name/corpus"
  log="$work/$name/log.txt"
  mkdir -p "$corpus" "$work/$name/artifacts"
  add_fixture_seeds "$name" "$corpus"
  args=(-runs="$runs" -max_len="$max_len" -timeout=10 -rss_limit_mb=2048
        -malloc_limit_mb=256 -print_final_stats=1
        -artifact_prefix="$work/$name/artifacts/")
  [[ -n "$seed" ]] && args+=(-seed="$seed")
  [[ -n "$max_time" ]] && args+=(-max_total_time="$max_time")
  start=$SECONDS
  status=0
  CLUSTERKV_FUZZ_SEED_DIR="$corpus" "$bin" "${args[@]}" "$corpus" \
      > "$log" 2>&1 || status=$?
  secs=$((SECONDS - start))
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)"
  cov="$(grep -o 'cov: [0-9]* ft: [0-9]*' "$log" | tail -1 || true)"
  seeds="$(ls "$corpus" | wc -l)"
  if [[ $status -eq 0 ]]; then
    echo "fuzz: $name OK: ${execs:-?} runs in ${secs}s, ${cov:-no coverage line}, corpus ${seeds} files"
  else
    failed=1
    echo "fuzz: $name FAILED (exit $status) after ${secs}s; log $log, artifacts in $work/$name/artifacts/"
    tail -n 40 "$log" | sed 's/^/  | /'
  fi
done

if [[ $failed -eq 0 ]]; then
  rm -rf "$work"
else
  exit 1
fi
