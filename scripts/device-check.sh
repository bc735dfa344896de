#!/usr/bin/env bash
# The device check, run on the GPU machine from the bundle that
# scripts/device-bundle.sh made here (docs/device-check.md). No build and no
# ctest there: the bundled binaries run directly. No `set -e`: every stage
# has its own timeout, the whole run a deadline (8 minutes), a failure is
# recorded and the next stage runs, and the table is printed last, always.
#
# Stages (in order of information per second):
#   probe        GPU and driver (nvidia-smi), where cuBLAS is, `ldd` of
#                every bundled binary ("not found" fails)
#   device       cuda_device_test, cuda_runtime_test
#   link         link_probe: pinned H2D/D2H, D2D, zero-copy gather GB/s
#   ops_cuda     cuda_ops_test, one process per test
#   ops_backend  backend_ops_test's CUDA cases, one process per test
#   e2e          cuda_e2e_test (CUDA vs CPU), when bundled
#   bench        cuda_ops_bench
#   engine       bench/gpu_engine_bench.sh over cluster_bench, when bundled
#   memcheck     compute-sanitizer memcheck of cuda_ops_test
#   racecheck    compute-sanitizer racecheck of cuda_ops_test
# On the device a skipped GTest case fails its stage (no usable device).
#
# --dry-run: the host-only self-test (no GPU needed): the probe reports a
# missing GPU, the stages run the binaries' fake-device parts instead
# (fake cases of cuda_runtime_test, backend_ops_test and cuda_e2e_test,
# device_backend_test, link_probe --dry-run, the benchmark's refusal without
# a device, gpu_engine_bench.sh --dry-run on the fake), the sanitizer stages
# are skipped, and a planted slow stage checks that a stage timeout is
# recorded as TIMEOUT.
#
# Usage: device-check.sh [BUNDLE] [--dry-run]
#   BUNDLE: the bundle folder (default: this script's folder).
# Environment:
#   CKV_CHECK_DEADLINE_S       the whole run (default 480)
#   CKV_CHECK_STAGE_TIMEOUT_S  every stage's timeout (default: per stage)
#   CKV_CHECK_CASE_TIMEOUT_S   one test process (default 90)
#   CKV_CHECK_MAX_PROCS        test processes per stage at most (default 64;
#                              more tests are run in groups)
#   CKV_CHECK_ONLY             stages to run, e.g. "probe link" (others SKIP)
#   CKV_CHECK_ENGINE_MODE      gpu_engine_bench.sh's mode on the device:
#                              empty (the full set, default) or --quick
#   OUT                        where the table's JSON, link_probe.json,
#                              gpu_engine.{json,png} and a tarball of the
#                              logs are copied
# Results: BUNDLE/results/STAGE.log per stage, device-check.json, table.txt.
# Exit status: 0 when no stage failed or timed out, 1 otherwise, 64 usage.

SELF="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")"
STAGES=(probe device link ops_cuda ops_backend e2e bench engine memcheck
  racecheck)
declare -A STAGE_TIMEOUT=([probe]=60 [device]=120 [link]=90 [ops_cuda]=150
  [ops_backend]=120 [e2e]=150 [bench]=120 [engine]=240 [memcheck]=150
  [racecheck]=90)
CASE_TIMEOUT="${CKV_CHECK_CASE_TIMEOUT_S:-90}"
MAX_PROCS="${CKV_CHECK_MAX_PROCS:-64}"

# ---- helpers shared by the stages ----------------------------------------

# One line: tabs, newlines and carriage returns become spaces.
one_line() { tr '\t\r\n' '   ' | sed 's/  */ /g; s/^ //; s/ $//'; }

# The stage's result: report STATUS DETAIL (the last call wins).
report() {
  printf '%s\t%s\n' "$1" "$(printf '%s' "$2" | one_line)" > "$STATUS_FILE"
}

# Text the main run prints after the stage (results worth seeing at once).
show() { printf '%s\n' "$@" >> "$SHOW_FILE"; }

have_gpu() {
  command -v nvidia-smi > /dev/null 2>&1 &&
    timeout 20 nvidia-smi -L 2> /dev/null | grep -q '^GPU '
}

# The test names of bin/$1 (Suite.Case per line) matching filter $2.
list_tests() {
  local args=(--gtest_list_tests)
  [ -n "$2" ] && args+=(--gtest_filter="$2")
  timeout 30 "$BIN/$1" "${args[@]}" 2> /dev/null | awk '
    /^[^ ]/ { suite = $1; next }
    /^  [^ ]/ { print suite $1 }'
}

# Runs one GTest process: gtest_run BINARY [ARGS...]. Its output goes to
# this stage's log; sets G_RC, G_PASSED, G_FAILED, G_SKIPPED, G_BAD (the
# names of failed tests, or why the process gave no summary) and G_TIMEOUT.
gtest_run() {
  local bin="$1" out
  shift
  out="$(mktemp "$RESULTS/gtest.XXXXXX")"  # left behind if killed
  echo "--- $bin $*"
  timeout -k 5 "$CASE_TIMEOUT" "$BIN/$bin" "$@" > "$out" 2>&1
  G_RC=$?
  cat "$out"
  G_PASSED=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) tests\?\..*/\1/p' "$out")
  G_FAILED=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) tests\?, listed.*/\1/p' \
    "$out")
  G_SKIPPED=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) tests\?, listed.*/\1/p' \
    "$out")
  G_PASSED=${G_PASSED:-0} G_FAILED=${G_FAILED:-0} G_SKIPPED=${G_SKIPPED:-0}
  G_BAD=$(sed -n 's/^\[  FAILED  \] \([^ ,]*\).*/\1/p' "$out" |
    grep -v '^[0-9]*$' | sort -u | tr '\n' ' ')
  G_TIMEOUT=""
  if [ "$G_RC" -eq 124 ] || [ "$G_RC" -eq 137 ]; then
    G_TIMEOUT="timed out after ${CASE_TIMEOUT} s ($*) "
  elif [ "$G_RC" -ne 0 ] && [ -z "$G_BAD" ]; then
    G_BAD="exit $G_RC without a failed test ($*): $(grep -v '^\[' "$out" |
      grep -v '^ *$' | tail -1 | cut -c1-120) "
  fi
  rm -f "$out"
}

# Runs the tests of bin/$1 matching filter $2 one process each (in at most
# MAX_PROCS groups) and reports the stage. $3: "whole" runs one process.
# On the device a skipped test fails; in a dry run skips are expected.
gtest_stage_part() {
  local bin="$1" filter="$2" how="$3" names=() groups=() i n per listed
  P_PASSED=0 P_FAILED=0 P_SKIPPED=0 P_BAD="" P_TIMEOUT="" P_PROCS=0
  if [ "$how" = whole ]; then
    groups=("${filter:-*}")
  else
    # (No process substitution anywhere: it needs /dev/fd.)
    listed=$(list_tests "$bin" "$filter")
    [ -n "$listed" ] && mapfile -t names <<< "$listed"
    n=${#names[@]}
    if [ "$n" -eq 0 ]; then
      P_BAD="no test matches '${filter:-*}': $(timeout 30 "$BIN/$bin" \
        --gtest_list_tests 2>&1 | tail -1 | cut -c1-160)"
      P_FAILED=1
      return
    fi
    per=$(((n + MAX_PROCS - 1) / MAX_PROCS))
    for ((i = 0; i < n; i += per)); do
      groups+=("$(IFS=:; echo "${names[*]:i:per}")")
    done
  fi
  for g in "${groups[@]}"; do
    gtest_run "$bin" --gtest_filter="$g"
    P_PROCS=$((P_PROCS + 1))
    P_PASSED=$((P_PASSED + G_PASSED))
    P_FAILED=$((P_FAILED + G_FAILED))
    P_SKIPPED=$((P_SKIPPED + G_SKIPPED))
    if [ -z "$G_TIMEOUT" ] && [ "$G_RC" -ne 0 ] && [ "$G_FAILED" -eq 0 ]
    then
      P_FAILED=$((P_FAILED + 1))  # crashed: no summary
    fi
    P_BAD="$P_BAD$G_BAD"
    P_TIMEOUT="$P_TIMEOUT$G_TIMEOUT"
  done
}

# Runs each "BINARY FILTER HOW" of $@ and reports the stage: PASS when
# every part passed (and, on the device, skipped nothing).
gtest_stage() {
  local status=PASS detail="" part bin filter how
  for part in "$@"; do
    read -r bin filter how <<< "$part"
    [ "$filter" = "-" ] && filter=""
    gtest_stage_part "$bin" "$filter" "$how"
    detail="$detail$bin: $P_PASSED passed"
    [ "$P_SKIPPED" -gt 0 ] && detail="$detail, $P_SKIPPED skipped"
    [ "$how" = whole ] || detail="$detail in $P_PROCS procs"
    if [ "$P_FAILED" -gt 0 ] || [ -n "$P_BAD" ]; then
      status=FAIL
      detail="$detail FAILED: $P_BAD$P_TIMEOUT"
    elif [ -n "$P_TIMEOUT" ]; then
      [ "$status" = PASS ] && status=TIMEOUT
      detail="$detail: $P_TIMEOUT"
    elif [ "$MODE" = device ] && [ "$P_SKIPPED" -gt 0 ]; then
      status=FAIL
      detail="$detail: skipped on the device (unusable device?)"
    fi
    detail="$detail; "
  done
  report "$status" "${detail%; }"
}

# A JSON value of the compact JSON in file $2 at "key": first match of $1.
json_value() {
  grep -o "\"$1\":[^,}]*" "$2" | head -1 | cut -d: -f2- | tr -d '"'
}
json_figure() {
  grep -o "\"$1\":{\"gbps\":[^,}]*" "$2" | head -1 | sed 's/.*://'
}

# ---- the stages (each runs in its own process under a timeout) -----------

stage_probe() {
  local status=PASS detail="" gpu missing=() b line
  echo "bundle: $BUNDLE"
  sed -n '1,6p' "$BUNDLE/MANIFEST" 2> /dev/null
  uname -a
  sed -n 's/^PRETTY_NAME=//p' /etc/os-release 2> /dev/null
  if command -v nvidia-smi > /dev/null 2>&1; then
    timeout 20 nvidia-smi -L
    gpu=$(timeout 20 nvidia-smi \
      --query-gpu=name,driver_version,memory.total --format=csv,noheader \
      2> /dev/null | head -1)
    timeout 20 nvidia-smi
  fi
  if have_gpu; then
    detail="$(timeout 20 nvidia-smi -L | grep -c '^GPU ') GPU: $gpu"
  elif [ "$MODE" = device ]; then
    status=FAIL
    if command -v nvidia-smi > /dev/null 2>&1; then
      detail="no GPU: nvidia-smi -L lists none"
    else
      detail="no GPU: nvidia-smi not found (no driver)"
    fi
  else
    detail="no GPU (dry run)"
  fi
  detail="$detail; $CUBLAS_NOTE"
  command -v compute-sanitizer > /dev/null 2>&1 &&
    timeout 20 compute-sanitizer --version | tail -1
  for b in "$BIN"/*; do
    echo "--- ldd $b"
    ldd "$b" 2>&1
    for line in $(ldd "$b" 2>&1 | awk '/not found/ { print $1 }'); do
      missing+=("$(basename "$b"): $line")
    done
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    status=FAIL
    detail="$detail; not found: ${missing[*]}"
  else
    detail="$detail; $(find "$BIN" -type f | wc -l) binaries load"
  fi
  report "$status" "$detail"
}

stage_device() {
  gtest_stage "cuda_device_test - whole" "cuda_runtime_test - whole"
}

stage_link() {
  local json="$RESULTS/link_probe.json" rc v name detail="" bad=""
  if [ ! -x "$BIN/link_probe" ]; then
    report FAIL "link_probe not in the bundle"
    return
  fi
  rm -f "$json"
  if [ "$MODE" = dry-run ]; then
    "$BIN/link_probe" --dry-run --pool-mib 64 --gather-mib 16 --json "$json"
    rc=$?
    cat "$json"
    if [ "$rc" -ne 0 ] || [ "$(json_value dry_run "$json")" != true ]; then
      report FAIL "link_probe --dry-run exit $rc"
      return
    fi
    for name in h2d_pinned d2h_pinned d2d gather_zero_copy gather_device; do
      [ "$(json_figure "$name" "$json")" = null ] || bad="$bad $name"
    done
    [ -n "$bad" ] && { report FAIL "dry-run figures not null:$bad"; return; }
    detail="JSON shape ok, $(json_value gather_runs "$json") runs of"
    detail="$detail $(json_value gather_rows "$json") rows"
    if ! have_gpu; then  # the refusal without a device
      "$BIN/link_probe" --pool-mib 64 --gather-mib 16 > /dev/null 2> "$json.err"
      rc=$?
      cat "$json.err"
      if [ "$rc" -ne 2 ] || ! grep -q "no CUDA device" "$json.err"; then
        report FAIL "$detail; without a device: exit $rc, not 2 + message"
        return
      fi
      detail="$detail; refuses without a device (exit 2)"
    fi
    report PASS "$detail"
    return
  fi
  "$BIN/link_probe" --json "$json"
  rc=$?
  cat "$json" 2> /dev/null
  for name in h2d_pinned d2h_pinned d2d gather_zero_copy gather_device; do
    v=$(json_figure "$name" "$json" 2> /dev/null)
    detail="$detail $name ${v:-?}"
  done
  detail="GB/s:$detail"
  if [ "$rc" -ne 0 ]; then
    report FAIL "exit $rc; $detail"
  elif [ "$(json_value gather_verified "$json")" != true ]; then
    report FAIL "gathered rows differ from the pool; $detail"
  else
    report PASS "$detail"
  fi
}

# The kernels against the references, the CUDA selection kernels against
# clusterkv's own plans and the cache_lists kernels against the host's
# BlockCache (device_runtime_test's SelectBlocksTest, RowListsTest and
# CacheListsTest: their fake cases run in the dry run, the CUDA cases on
# the device).
stage_ops_cuda() {
  gtest_stage \
    "device_runtime_test SelectBlocksTest.*:RowListsTest.*:CacheListsTest.* cases" \
    "cuda_ops_test - cases"
}

stage_ops_backend() {
  local filter='*cuda*:*Cuda*:*CUDA*'
  [ "$MODE" = dry-run ] && filter='*fake*'
  if [ ! -x "$BIN/backend_ops_test" ]; then
    report FAIL "backend_ops_test not in the bundle"
  elif [ "$MODE" = device ] && [ -z "$(list_tests backend_ops_test "$filter")" ]
  then
    report SKIP "backend_ops_test has no CUDA case yet"
  else
    gtest_stage "backend_ops_test $filter cases"
  fi
}

stage_e2e() {
  local parts=() b
  if [ "$MODE" = dry-run ]; then
    # device_backend_test (left out of a bundle that would be too big; one
    # process per test: as one it passed 90 s on a loaded 2-vCPU machine)
    # and cuda_e2e_test's fake cases (its CUDA cases skip).
    [ -x "$BIN/device_backend_test" ] && parts+=("device_backend_test -")
    [ -x "$BIN/cuda_e2e_test" ] && parts+=("cuda_e2e_test - whole")
    if [ "${#parts[@]}" -eq 0 ]; then
      report FAIL "neither device_backend_test nor cuda_e2e_test bundled"
    else
      gtest_stage "${parts[@]}"
    fi
  elif [ -x "$BIN/cuda_e2e_test" ]; then
    gtest_stage "cuda_e2e_test - whole"
  else
    report SKIP "cuda_e2e_test not in the bundle"
  fi
}

stage_bench() {
  local b=cuda_ops_bench rc
  [ -x "$BIN/$b" ] || { report FAIL "$b not in the bundle"; return; }
  "$BIN/$b" > "$RESULTS/$b.out" 2>&1
  rc=$?
  cat "$RESULTS/$b.out"
  if [ "$MODE" = dry-run ] && ! have_gpu; then
    if [ "$rc" -eq 0 ] || [ "$rc" -ge 124 ]; then
      report FAIL "$b: exit $rc without a device (want a refusal)"
    else
      report PASS "$b refuses without a device (exit $rc)"
    fi
  elif [ "$rc" -ne 0 ]; then
    report FAIL "$b: exit $rc: $(tail -1 "$RESULTS/$b.out")"
  else
    show "--- $b" "$(tail -n 16 "$RESULTS/$b.out")"
    report PASS "$b: $(grep -c . "$RESULTS/$b.out") lines, table above"
  fi
}

# bench/gpu_engine_bench.sh (the engine benchmark) over cluster_bench: the
# full set on the device (CKV_CHECK_ENGINE_MODE=--quick: 32k only), the
# fake device and a tiny shape in a dry run. Each run writes its JSON; the
# plot (python3 with matplotlib) merges them.
stage_engine() {
  local script="$BUNDLE/bench/gpu_engine_bench.sh" out="$RESULTS/gpu_engine"
  local mode=() rc runs failed
  if [ ! -f "$script" ] || [ ! -x "$BIN/cluster_bench" ]; then
    report SKIP "gpu_engine_bench.sh or cluster_bench not in the bundle"
    return
  fi
  if [ "$MODE" = dry-run ]; then
    mode=(--dry-run)
  elif [ -n "${CKV_CHECK_ENGINE_MODE:-}" ]; then
    mode=("$CKV_CHECK_ENGINE_MODE")
  fi
  rm -rf "$out"
  bash "$script" "$BIN/cluster_bench" "$out" "${mode[@]}" > "$out.txt" 2>&1
  rc=$?
  cat "$out.txt"
  runs=$(find "$out" -name 'gpu_engine_*.json' 2> /dev/null | wc -l)
  failed=$(grep -c 'failed (exit' "$out.txt")
  if [ -s "$out/gpu_engine.json" ]; then
    show "$(grep -v '^==' "$out.txt" | tail -n 24)"
  fi
  if [ "$rc" -eq 0 ]; then
    report PASS "$runs runs${mode[*]:+ (${mode[*]})}; table: gpu_engine.json"
  elif [ "$MODE" = dry-run ] && [ "$failed" -eq 0 ] && [ "$runs" -gt 0 ]
  then
    report PASS "$runs runs (--dry-run); no plot (no python3 with matplotlib)"
  else
    report FAIL "exit $rc: $failed of the runs failed, $runs JSON written"
  fi
}

# compute-sanitizer --tool $1 over cuda_ops_test.
sanitizer_stage() {
  local tool="$1" filter="${2:-*}" cs rc summary
  cs=$(command -v compute-sanitizer ||
    ls /usr/local/cuda/bin/compute-sanitizer 2> /dev/null)
  if [ "$MODE" = dry-run ]; then
    report SKIP "dry run: needs a device${cs:+ (compute-sanitizer found)}"
    return
  fi
  [ -n "$cs" ] || { report SKIP "compute-sanitizer not found"; return; }
  "$cs" --tool "$tool" --error-exitcode 86 --print-limit 20 \
    "$BIN/cuda_ops_test" --gtest_filter="$filter" > "$RESULTS/$tool.out" 2>&1
  rc=$?
  cat "$RESULTS/$tool.out"
  summary=$(grep 'ERROR SUMMARY' "$RESULTS/$tool.out" | tail -1 |
    sed 's/^=* *//')
  if [ "$rc" -eq 0 ]; then
    report PASS "cuda_ops_test: ${summary:-no summary}"
  else
    report FAIL "cuda_ops_test exit $rc: ${summary:-$(tail -1 \
      "$RESULTS/$tool.out")}"
  fi
}
stage_memcheck() { sanitizer_stage memcheck; }
stage_racecheck() {
  sanitizer_stage racecheck "${CKV_CHECK_RACECHECK_FILTER:-*}"
}

# The planted slow stage of the dry run (its timeout must be recorded).
# Its child leaves a mark after 4 s unless the timeout stopped it.
stage__slow() {
  report PASS "planted slow stage was not stopped"
  (sleep 4 && touch "$RESULTS/_slow.late") &
  sleep 30
}

# ---- one stage in its own process ----------------------------------------

if [ "${1:-}" = --stage ]; then
  cd "$BIN_ROOT" || exit 1  # bin/ and models/ (unpacked) are here
  "stage_$2"
  exit 0
fi

# ---- the run ---------------------------------------------------------------

usage() { sed -n '2,45p' "$SELF" | sed 's/^# \{0,1\}//'; exit "${1:-64}"; }
MODE=device
BUNDLE=""
for a in "$@"; do
  case "$a" in
    --dry-run) MODE=dry-run ;;
    -h|--help) usage 0 ;;
    -*) echo "device-check: unknown option $a" >&2; usage ;;
    *) BUNDLE="$a" ;;
  esac
done
BUNDLE="${BUNDLE:-$(dirname "$SELF")}"
if [ ! -d "$BUNDLE/bin" ]; then
  echo "device-check: $BUNDLE is no bundle (no bin/):" \
       "make one with scripts/device-bundle.sh" >&2
  exit 64
fi
BUNDLE="$(cd "$BUNDLE" && pwd)"
RESULTS="$BUNDLE/results"
mkdir -p "$RESULTS"
rm -f "$RESULTS"/*.log "$RESULTS"/*.status "$RESULTS"/*.show \
  "$RESULTS"/gtest.??????
# The binaries come gzipped (scripts/device-bundle.sh): unpacked into a
# temporary folder (removed at the end), so that the bundle stays as small
# as it was made (a dry run here does not grow what the call carries).
BIN_ROOT="$(mktemp -d "${TMPDIR:-/tmp}/ckv-device-check.XXXXXX")"
BIN="$BIN_ROOT/bin"
mkdir -p "$BIN"
for f in "$BUNDLE"/bin/*; do
  [ -f "$f" ] || continue
  if [[ "$f" == *.gz ]]; then
    b="$BIN/$(basename "$f" .gz)"
    gzip -dc "$f" > "$b" || echo "device-check: cannot unpack $f" >&2
  else
    b="$BIN/$(basename "$f")"
    cp "$f" "$b"
  fi
  chmod +x "$b"
done
# Shared libraries the bundle carries (RUNPATH $ORIGIN/../lib).
[ -d "$BUNDLE/lib" ] && cp -a "$BUNDLE/lib" "$BIN_ROOT/lib"
# The models, gzipped or not: the stages run in BIN_ROOT, where the tests'
# relative "models/" path finds them.
mkdir -p "$BIN_ROOT/models"
for f in "$BUNDLE"/models/*; do
  [ -f "$f" ] || continue
  if [[ "$f" == *.gz ]]; then
    gzip -dc "$f" > "$BIN_ROOT/models/$(basename "$f" .gz)" ||
      echo "device-check: cannot unpack $f" >&2
  else
    ln -s "$f" "$BIN_ROOT/models/$(basename "$f")"
  fi
done
DEADLINE="${CKV_CHECK_DEADLINE_S:-480}"
START_NS=$(date +%s%N)
START_ISO=$(date -u +%Y-%m-%dT%H:%M:%SZ)
export MODE BUNDLE RESULTS CASE_TIMEOUT MAX_PROCS BIN BIN_ROOT

elapsed_s() { echo $((($(date +%s%N) - START_NS) / 1000000000)); }

# cuBLAS: the soname the CUDA backend opens (kernels/cuda/cublas_loader.h;
# an older bundle's binaries linked it: ldd), found in the loader's cache, the
# CUDA toolkit or PyTorch's nvidia/ wheels; its folder joins
# LD_LIBRARY_PATH when the loader would not find it on its own.
find_cublas() {
  local need dir py cands=()
  need=$(for b in "$BIN"/*; do ldd "$b" 2> /dev/null; done |
    grep -o 'libcublas\.so\.[0-9]*' | sort -u | head -1)
  CUBLAS_NEED="${need:-libcublas.so.13}"
  if ldconfig -p 2> /dev/null | grep -q "$CUBLAS_NEED "; then
    CUBLAS_NOTE="cuBLAS $CUBLAS_NEED: $(ldconfig -p |
      awk -v n="$CUBLAS_NEED" '$1 == n { print $NF; exit }') (ldconfig)"
    return
  fi
  IFS=: read -ra cands <<< "${LD_LIBRARY_PATH:-}"
  cands+=(/usr/local/cuda/lib64 /usr/local/cuda/lib
    /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-*/lib64)
  for py in /opt/torch/.venv/bin/python3 python3; do
    command -v "$py" > /dev/null 2>&1 || continue
    dir=$(timeout 20 "$py" -c \
      'import sysconfig; print(sysconfig.get_paths()["purelib"])' 2> /dev/null)
    [ -n "$dir" ] && cands+=("$dir"/nvidia/cublas/lib "$dir"/nvidia/cu1*/lib)
  done
  cands+=(/opt/torch/.venv/lib/python3*/site-packages/nvidia/cublas/lib
    /opt/torch/.venv/lib/python3*/site-packages/nvidia/cu1*/lib)
  for dir in "${cands[@]}"; do
    if [ -f "$dir/$CUBLAS_NEED" ]; then
      export LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
      CUBLAS_NOTE="cuBLAS $CUBLAS_NEED: $dir"
      return
    fi
  done
  CUBLAS_NOTE="cuBLAS $CUBLAS_NEED not found"
}
find_cublas
export CUBLAS_NOTE

declare -A ST SECS DETAIL
ROWS=()
INTERRUPTED=""

# run_stage NAME: runs it under its timeout (clamped to the deadline) and
# records status, seconds and detail.
run_stage() {
  local name="$1" t left rc t0 status detail
  if [ -n "${CKV_CHECK_ONLY:-}" ] && [[ " $CKV_CHECK_ONLY " != *" $name "* ]]
  then
    ST[$name]=SKIP SECS[$name]=0.0 DETAIL[$name]="not in CKV_CHECK_ONLY"
    return
  fi
  t="${CKV_CHECK_STAGE_TIMEOUT_S:-${STAGE_TIMEOUT[$name]:-60}}"
  left=$((DEADLINE - $(elapsed_s) - 5))
  if [ "$left" -lt 5 ]; then
    ST[$name]=SKIP SECS[$name]=0.0
    DETAIL[$name]="deadline of $DEADLINE s reached"
    return
  fi
  [ "$t" -gt "$left" ] && t=$left
  export STATUS_FILE="$RESULTS/$name.status" SHOW_FILE="$RESULTS/$name.show"
  rm -f "$STATUS_FILE" "$SHOW_FILE"
  echo "== $name (timeout $t s)"
  t0=$(date +%s%N)
  timeout -k 5 "$t" "$BASH" "$SELF" --stage "$name" \
    > "$RESULTS/$name.log" 2>&1 < /dev/null
  rc=$?
  SECS[$name]=$(awk -v ns=$(($(date +%s%N) - t0)) \
    'BEGIN { printf "%.1f", ns / 1e9 }')
  status=""
  detail=""
  if [ -f "$STATUS_FILE" ]; then
    IFS=$'\t' read -r status detail < "$STATUS_FILE"
  fi
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    status=TIMEOUT
    detail="no result after ${t} s${detail:+; last: $detail}"
  elif [ -z "$status" ]; then
    status=FAIL
    detail="stage died (exit $rc) without a result"
  fi
  ST[$name]=$status DETAIL[$name]=$detail
  echo "   $status ${SECS[$name]} s: $detail"
  [ -s "$SHOW_FILE" ] && sed 's/^/   /' "$SHOW_FILE"
  if [ "$status" = FAIL ] || [ "$status" = TIMEOUT ]; then
    echo "   --- last lines of results/$name.log"
    tail -n 15 "$RESULTS/$name.log" | sed 's/^/   | /'
  fi
}

json_str() {
  printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g' | one_line |
    sed 's/^/"/; s/$/"/'
}

finish() {
  local rc=0 name n_bad=0 bad="" json table
  trap - EXIT INT TERM
  [ -n "$INTERRUPTED" ] && rc=1
  for name in "${ROWS[@]}"; do
    if [ -z "${ST[$name]:-}" ]; then
      ST[$name]=SKIP SECS[$name]=0.0
      DETAIL[$name]="${INTERRUPTED:-not run}"
    fi
    case "${ST[$name]}" in
      FAIL|TIMEOUT) rc=1; n_bad=$((n_bad + 1)); bad="$bad $name" ;;
    esac
  done
  table="$RESULTS/table.txt"
  {
    echo
    echo "== device-check ($MODE) of $BUNDLE: $(elapsed_s) s" \
         "(deadline $DEADLINE s), $START_ISO"
    printf '%-12s %-8s %7s  %s\n' stage status secs detail
    for name in "${ROWS[@]}"; do
      printf '%-12s %-8s %7s  %s\n' "$name" "${ST[$name]}" \
        "${SECS[$name]}" "${DETAIL[$name]}"
    done
    if [ "$rc" -eq 0 ]; then
      echo "RESULT: PASS (${#ROWS[@]} stages, none failed)"
    else
      echo "RESULT: FAIL ($n_bad of ${#ROWS[@]} stages:$bad)"
    fi
  } > "$table"
  json="$RESULTS/device-check.json"
  {
    printf '{"mode":%s,"bundle":%s,"commit":%s,"started":"%s",' \
      "$(json_str "$MODE")" "$(json_str "$BUNDLE")" \
      "$(json_str "$(sed -n 's/^commit: //p' "$BUNDLE/MANIFEST" \
        2> /dev/null)")" "$START_ISO"
    printf '"seconds":%s,"deadline_s":%s,"result":"%s","stages":[' \
      "$(elapsed_s)" "$DEADLINE" "$([ "$rc" -eq 0 ] && echo PASS ||
        echo FAIL)"
    local sep=""
    for name in "${ROWS[@]}"; do
      printf '%s{"stage":"%s","status":"%s","seconds":%s,"detail":%s}' \
        "$sep" "$name" "${ST[$name]}" "${SECS[$name]}" \
        "$(json_str "${DETAIL[$name]}")"
      sep=","
    done
    printf ']}\n'
  } > "$json"
  if [ -n "${OUT:-}" ] && mkdir -p "$OUT" 2> /dev/null; then
    cp "$json" "$OUT/device-check.json"
    for f in link_probe.json gpu_engine/gpu_engine.json \
             gpu_engine/gpu_engine.png; do
      [ -f "$RESULTS/$f" ] && cp "$RESULTS/$f" "$OUT/"
    done
    tar czf "$OUT/device-check-logs.tar.gz" -C "$BUNDLE" results \
      2> /dev/null
  fi
  cat "$table"
  rm -rf "$BIN_ROOT"
  exit "$rc"
}
trap finish EXIT
trap 'INTERRUPTED="interrupted"; exit 130' INT TERM

echo "device-check ($MODE): bundle $BUNDLE, deadline $DEADLINE s;" \
     "$CUBLAS_NOTE"
[ -n "${LD_LIBRARY_PATH:-}" ] && echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
ROWS=("${STAGES[@]}")
[ "$MODE" = dry-run ] && ROWS+=(timeout_ctl)
for name in "${STAGES[@]}"; do
  run_stage "$name"
done

# Dry run: a planted slow stage under a 2-second timeout must come back as
# TIMEOUT within the kill grace, its child stopped too (no /proc needed).
if [ "$MODE" = dry-run ]; then
  plant_t0=$(date +%s)
  rm -f "$RESULTS/_slow.late"
  CKV_CHECK_ONLY="" CKV_CHECK_STAGE_TIMEOUT_S=2 run_stage _slow > /dev/null
  plant_s=$(($(date +%s) - plant_t0))
  SECS[timeout_ctl]=${SECS[_slow]:-0}
  if [ "${ST[_slow]:-}" = SKIP ]; then
    ST[timeout_ctl]=SKIP DETAIL[timeout_ctl]="${DETAIL[_slow]}"
  else
    plant_wait=$((plant_t0 + 6 - $(date +%s)))  # past the child's 4 s
    [ "$plant_wait" -gt 0 ] && sleep "$plant_wait"
    if [ "${ST[_slow]}" = TIMEOUT ] && [ "$plant_s" -le 9 ] &&
       [ ! -e "$RESULTS/_slow.late" ]; then
      ST[timeout_ctl]=PASS
      DETAIL[timeout_ctl]="planted slow stage: TIMEOUT after 2 s, its"
      DETAIL[timeout_ctl]+=" processes stopped"
    else
      ST[timeout_ctl]=FAIL
      DETAIL[timeout_ctl]="planted slow stage: ${ST[_slow]} after $plant_s s"
      [ -e "$RESULTS/_slow.late" ] &&
        DETAIL[timeout_ctl]+=", its child still ran"
      DETAIL[timeout_ctl]+=" (want TIMEOUT within 9 s, child stopped)"
    fi
  fi
fi
