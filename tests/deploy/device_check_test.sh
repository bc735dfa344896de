#!/usr/bin/env bash
# ctest device_check_test: the stage control of scripts/device-check.sh on
# fake bundles of stub programs (no build, no GPU, no root): a clean dry
# run passes; a planted failing test, a crash, a planted slow stage and the
# deadline are recorded (FAIL, TIMEOUT, SKIP), the next stages still run,
# the table is printed last and the exit status is 1; the device mode
# (with a stub nvidia-smi and compute-sanitizer) fails skipped tests.
#
# Usage: device_check_test.sh SOURCE_DIR [PYTHON]   (PYTHON checks the JSON)
set -u
SRC="$1"
PY="${2:-}"
CHECK="$SRC/scripts/device-check.sh"
TMP="$(mktemp -d)"
trap '[ -n "${CKV_KEEP_TMP:-}" ] || rm -rf "$TMP"' EXIT
FAILURES=0

fail() {
  echo "FAIL: $*"
  FAILURES=$((FAILURES + 1))
}

# A stub GTest binary: its cases are STUB_CASES; STUB_FAIL_<name>,
# STUB_SKIP_<name>, STUB_SLEEP_<name> and STUB_CRASH_<name> (environment)
# plant failures, skips, a slow run and a crash.
write_fake_gtest() {
  cat > "$1" << 'EOF'
#!/usr/bin/env bash
name=$(basename "$0")
var() { local v="STUB_$1_$name"; echo "${!v:-}"; }
filter='*'
list=0
for a in "$@"; do
  case "$a" in
    --gtest_list_tests) list=1 ;;
    --gtest_filter=*) filter="${a#--gtest_filter=}" ;;
  esac
done
matches() {
  local f
  IFS=: read -ra pats <<< "$filter"
  for f in "${pats[@]}"; do
    # shellcheck disable=SC2053
    [[ "$1" == $f ]] && return 0
  done
  return 1
}
chosen=()
for c in $STUB_CASES; do matches "$c" && chosen+=("$c"); done
if [ "$list" = 1 ]; then
  suite=""
  for c in "${chosen[@]}"; do
    [ "${c%%.*}." = "$suite" ] || { suite="${c%%.*}."; echo "$suite"; }
    echo "  ${c#*.}  # GetParam() = stub"
  done
  exit 0
fi
[ -n "$(var SLEEP)" ] && sleep "$(var SLEEP)"
if [ -n "$(var CRASH)" ]; then
  echo 'Segmentation "fault" in a \stub'
  kill -SEGV $$
fi
passed=() failed=() skipped=()
for c in "${chosen[@]}"; do
  echo "[ RUN      ] $c"
  if [[ " $(var FAIL) " == *" $c "* ]]; then
    echo "stub.cc:1: Failure"
    echo "[  FAILED  ] $c, where GetParam() = stub (0 ms)"
    failed+=("$c")
  elif [[ " $(var SKIP) " == *" $c "* ]]; then
    echo "[  SKIPPED ] $c (0 ms)"
    skipped+=("$c")
  else
    echo "[       OK ] $c (0 ms)"
    passed+=("$c")
  fi
done
echo "[==========] ${#chosen[@]} tests ran."
echo "[  PASSED  ] ${#passed[@]} tests."
if [ "${#skipped[@]}" -gt 0 ]; then
  echo "[  SKIPPED ] ${#skipped[@]} tests, listed below:"
  for c in "${skipped[@]}"; do echo "[  SKIPPED ] $c"; done
fi
if [ "${#failed[@]}" -gt 0 ]; then
  echo "[  FAILED  ] ${#failed[@]} tests, listed below:"
  for c in "${failed[@]}"; do echo "[  FAILED  ] $c"; done
  exit 1
fi
exit 0
EOF
  chmod +x "$1"
}

# make_bundle DIR: bin/ of stubs named as the real binaries.
make_bundle() {
  local dir="$1" b
  mkdir -p "$dir/bin" "$dir/stub"
  write_fake_gtest "$dir/stub/fake_gtest"
  echo "commit: 0123456789abcdef stub" > "$dir/MANIFEST"
  for b in cuda_device_test:"CudaDevice.Count CudaDevice.Props" \
           cuda_runtime_test:"Rt/Conf.Copies/fake Rt/Conf.Copies/cuda" \
           cuda_ops_test:"CudaOpsTest.A CudaOpsTest.B CudaOpsTest.C" \
           backend_ops_test:"B/Ops.Add/cpu1 B/Ops.Add/fake_inline B/Ops.Mul/fake_threaded B/Ops.Add/cuda" \
           device_runtime_test:"SelectBlocksTest.Fake SelectBlocksTest.Cuda" \
           device_backend_test:"DeviceBackendTest.Demo DeviceBackendTest.Fork"
  do
    # A copy (the stub's name is its file's), its cases on line 2.
    cp "$dir/stub/fake_gtest" "$dir/bin/${b%%:*}"
    sed -i "2i STUB_CASES=\"${b#*:}\"" "$dir/bin/${b%%:*}"
  done
  # The bundle's binaries come gzipped: one stub does too.
  gzip -9 "$dir/bin/cuda_device_test"
  cat > "$dir/bin/link_probe" << 'EOF'
#!/usr/bin/env bash
json="" dry=0
while [ $# -gt 0 ]; do
  case "$1" in --dry-run) dry=1 ;; --json) json="$2"; shift ;; esac
  shift
done
fig() { printf '"%s":{"gbps":%s,"min_gbps":%s,"max_gbps":%s,"mean_ms":%s,"bytes":1}' "$1" "$2" "$2" "$2" "$2"; }
if [ "$dry" = 0 ] && [ -z "${STUB_DEVICE:-}" ]; then
  echo "link_probe: no CUDA device 0: stub" >&2
  exit 2
fi
v=null verified=null
[ "$dry" = 0 ] && v=12.5 verified=true
out="{\"probe\":\"link_probe\",\"dry_run\":$([ $dry = 1 ] && echo true || echo false),\"config\":{\"gather_runs\":3,\"gather_rows\":99},\"results\":{$(fig h2d_pinned $v),$(fig d2h_pinned $v),$(fig d2d $v),$(fig gather_zero_copy $v),$(fig gather_device $v)},\"gather_verified\":$verified}"
if [ -n "$json" ]; then echo "$out" > "$json"; else echo "$out"; fi
EOF
  # The engine benchmark: one run's JSON; the plot (gpu_engine.json) only
  # where STUB_ENGINE_PLOT is set, else exit 1 as without matplotlib.
  mkdir -p "$dir/bench"
  printf '#!/usr/bin/env bash\n' > "$dir/bin/cluster_bench"
  cat > "$dir/bench/gpu_engine_bench.sh" << 'EOF'
#!/usr/bin/env bash
mkdir -p "$2"
echo '{}' > "$2/gpu_engine_device_per_query_head.json"
[ -n "${STUB_ENGINE_PLOT:-}" ] || exit 1
echo '{}' > "$2/gpu_engine.json"
echo "mode step_ms"
echo "resident 1.0"
EOF
  cat > "$dir/bin/cuda_ops_bench" << 'EOF'
#!/usr/bin/env bash
[ -n "${STUB_DEVICE:-}" ] || { echo "FATAL: no CUDA device: stub" >&2; exit 1; }
printf 'op ms note\ndecode 1.0 stub\n'
EOF
  chmod +x "$dir"/bin/*
}

# run NAME [ENV...] -- ARGS: runs the check, output in $TMP/NAME.out,
# exit status in RC.
run() {
  local name="$1" envs=()
  shift
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" bash "$CHECK" "$@" > "$TMP/$name.out" 2>&1
  RC=$?
}

# expect_row NAME STAGE STATUS [DETAIL-SUBSTRING]
expect_row() {
  local row
  row=$(sed -n '/^== device-check/,$p' "$TMP/$1.out" |
    awk -v s="$2" '$1 == s')
  [ -n "$row" ] || { fail "$1: no table row for $2"; return; }
  [ "$(echo "$row" | awk '{ print $2 }')" = "$3" ] ||
    fail "$1: $2 is not $3: $row"
  if [ -n "${4:-}" ] && [[ "$row" != *"$4"* ]]; then
    fail "$1: $2's detail lacks '$4': $row"
  fi
}

expect_table_last() {
  tail -1 "$TMP/$1.out" | grep -q "^RESULT: $2" ||
    fail "$1: the last line is not 'RESULT: $2': $(tail -1 "$TMP/$1.out")"
}

expect_json() {
  local file="$1/results/device-check.json"
  [ -s "$file" ] || { fail "$2: no $file"; return; }
  grep -q "\"result\":\"$3\"" "$file" || fail "$2: JSON result is not $3"
  if [ -n "$PY" ]; then
    "$PY" -c 'import json, sys; d = json.load(open(sys.argv[1]));
assert d["stages"] and all("status" in s for s in d["stages"])' "$file" ||
      fail "$2: $file is not valid JSON"
  fi
}

# 1. A clean dry run.
B1="$TMP/clean"
make_bundle "$B1"
run clean -- "$B1" --dry-run
[ "$RC" -eq 0 ] || fail "clean dry run: exit $RC"
for s in probe device link ops_cuda ops_backend e2e bench; do
  expect_row clean "$s" PASS
done
expect_row clean memcheck SKIP "dry run"
expect_row clean engine PASS "1 runs (--dry-run); no plot"
expect_row clean timeout_ctl PASS "processes stopped"
expect_row clean ops_backend PASS "2 passed in 2 procs"
expect_row clean device PASS "cuda_runtime_test: 2 passed"
expect_table_last clean PASS
expect_json "$B1" clean PASS
[ ! -e "$B1/bin/cuda_device_test" ] ||
  fail "clean: the run unpacked a binary into the bundle"

# 2. A failing test, a crash, a planted slow stage: recorded, the next
# stages still run, the table comes last, exit status 1.
B2="$TMP/planted"
make_bundle "$B2"
run planted STUB_FAIL_cuda_ops_test=CudaOpsTest.B \
  STUB_CRASH_cuda_device_test=1 STUB_SLEEP_backend_ops_test=30 \
  CKV_CHECK_STAGE_TIMEOUT_S=4 OUT="$TMP/out2" -- "$B2" --dry-run
[ "$RC" -eq 1 ] || fail "planted: exit $RC, want 1"
expect_row planted device FAIL "exit 139 without a failed test"
expect_row planted ops_cuda FAIL "CudaOpsTest.B"
expect_row planted ops_backend TIMEOUT "no result after 4 s"
expect_row planted e2e PASS
expect_row planted bench PASS
expect_row planted timeout_ctl PASS
expect_table_last planted "FAIL (3 of 11 stages: device ops_cuda ops_backend)"
grep -q "last lines of results/ops_cuda.log" "$TMP/planted.out" ||
  fail "planted: the failing stage's last lines are not printed"
grep -q "CudaOpsTest.B, where GetParam" "$TMP/planted.out" ||
  fail "planted: the failing stage's log tail lacks the failure"
expect_json "$B2" planted FAIL
for f in device-check.json device-check-logs.tar.gz link_probe.json; do
  [ -s "$TMP/out2/$f" ] || fail "planted: OUT lacks $f"
done

# 3. The deadline: a slow first test stage runs into it; the rest SKIP.
B3="$TMP/deadline"
make_bundle "$B3"
run deadline STUB_SLEEP_cuda_device_test=40 CKV_CHECK_DEADLINE_S=16 -- \
  "$B3" --dry-run
[ "$RC" -eq 1 ] || fail "deadline: exit $RC, want 1"
expect_row deadline probe PASS
expect_row deadline device TIMEOUT
expect_row deadline bench SKIP "deadline of 16 s reached"
expect_table_last deadline FAIL

# 4. The device mode (stub nvidia-smi and compute-sanitizer): a skipped
# test fails its stage; a test process over its own timeout is a TIMEOUT;
# no cuda_e2e_test is a SKIP.
B4="$TMP/device"
make_bundle "$B4"
mkdir -p "$TMP/path"
cat > "$TMP/path/nvidia-smi" << 'EOF'
#!/usr/bin/env bash
case "$*" in
  -L) echo "GPU 0: NVIDIA H200 (UUID: GPU-stub)" ;;
  *query*) echo "NVIDIA H200, 580.00, 143771 MiB" ;;
  *) echo "stub nvidia-smi" ;;
esac
EOF
cat > "$TMP/path/compute-sanitizer" << 'EOF'
#!/usr/bin/env bash
[ "$1" = --version ] && { echo "stub compute-sanitizer"; exit 0; }
while [ $# -ge 2 ] && [[ "$1" == --* ]]; do shift 2; done
"$@"
rc=$?
echo "========= ERROR SUMMARY: 0 errors"
exit $rc
EOF
chmod +x "$TMP/path"/*
run device PATH="$TMP/path:$PATH" STUB_DEVICE=1 STUB_ENGINE_PLOT=1 \
  "STUB_SKIP_cuda_runtime_test=Rt/Conf.Copies/cuda" \
  STUB_SLEEP_backend_ops_test=30 CKV_CHECK_CASE_TIMEOUT_S=1 -- "$B4"
[ "$RC" -eq 1 ] || fail "device: exit $RC, want 1"
expect_row device probe PASS "NVIDIA H200, 580.00"
expect_row device device FAIL "skipped on the device"
expect_row device link PASS "h2d_pinned 12.5"
expect_row device ops_backend TIMEOUT "timed out after 1 s"
expect_row device e2e SKIP "not in the bundle"
expect_row device bench PASS
expect_row device engine PASS "1 runs; table: gpu_engine.json"
grep -q "resident 1.0" "$TMP/device.out" ||
  fail "device: the engine table is not printed"
expect_row device memcheck PASS "ERROR SUMMARY: 0 errors"
grep -q "timeout_ctl" "$TMP/device.out" && fail "device: a timeout_ctl row"
expect_table_last device "FAIL (2 of 10 stages: device ops_backend)"

# 5. No bundle: usage error.
run nobundle -- "$TMP/none" --dry-run
[ "$RC" -eq 64 ] || fail "no bundle: exit $RC, want 64"

if [ "$FAILURES" -ne 0 ]; then
  for f in "$TMP"/*.out; do
    echo "===== $(basename "$f")"
    cat "$f"
  done
  echo "$FAILURES check(s) failed"
  exit 1
fi
echo "device_check_test: all checks passed"
