#!/usr/bin/env bash
# GPU check in one command: configure + build for sm_90 in build-gpu, run
# the CUDA tests (ctest -R cuda: every op against the CPU reference) and the
# GPU microbenchmark, then print a short table last. Meant for an H200/H100
# machine; the whole run stays well under 8 minutes there. Fails loudly
# (exit 1) when no CUDA device is present or any test is skipped or fails.
#
# Usage: scripts/device-check.sh [build-dir]   (default: build-gpu)
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD="${1:-build-gpu}"
JOBS="$(nproc 2>/dev/null || echo 4)"

die() { echo "DEVICE-CHECK FAILED: $*" >&2; exit 1; }

command -v nvidia-smi >/dev/null || die "nvidia-smi not found: no CUDA driver"
nvidia-smi -L >/dev/null 2>&1 || die "nvidia-smi -L failed: no CUDA device"
nvidia-smi -L | grep -q GPU || die "no GPU listed by nvidia-smi -L"
command -v nvcc >/dev/null || [ -x /usr/local/cuda/bin/nvcc ] ||
  die "nvcc not found"

start=$(date +%s)
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_CUDA_ARCHITECTURES=90 -DCLUSTERKV_CUDA=ON -DCLUSTERKV_TESTS=ON \
  -DCLUSTERKV_BENCH=ON > "$BUILD.configure.log" 2>&1 ||
  { tail -20 "$BUILD.configure.log"; die "configure failed (dependencies?)"; }
grep -q "CUDA backend ON" "$BUILD.configure.log" ||
  die "configure did not enable the CUDA backend"
cmake --build "$BUILD" -j "$JOBS" --target cuda_device_test cuda_ops_test \
  cuda_ops_bench > "$BUILD.build.log" 2>&1 ||
  { tail -30 "$BUILD.build.log"; die "build failed"; }
built=$(date +%s)

test_log="$BUILD.ctest.log"
timeout 300 ctest --test-dir "$BUILD" -R cuda --output-on-failure \
  --no-tests=error > "$test_log" 2>&1
test_rc=$?
cat "$test_log"
[ "$test_rc" -eq 0 ] || die "CUDA tests failed (ctest rc $test_rc)"
if grep -q "(Skipped)" "$test_log"; then
  die "CUDA tests were skipped: the device is not usable"
fi
tested=$(date +%s)

bench_out="$(timeout 180 "$BUILD/bench/cuda_ops_bench" 2>&1)"
bench_rc=$?
[ "$bench_rc" -eq 0 ] || { echo "$bench_out"; die "benchmark failed"; }
done_at=$(date +%s)

echo
echo "== device-check: build $((built - start)) s, tests $((tested - built)) s," \
  "bench $((done_at - tested)) s"
grep -E "tests passed|tests failed" "$test_log"
echo "$bench_out" | sed -n '/^$/,$p'
