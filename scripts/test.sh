#!/usr/bin/env bash
# The README's test command: installs packages, then runs every test once in
# the build where it says most (cmake/TestSets.cmake): the Release build (the
# product, benchmarks, fuzzers and GPU code) runs the numeric golden tests
# and the end-to-end tests of the shipped binaries; an AddressSanitizer +
# UndefinedBehaviorSanitizer build runs all the other tests. The
# ThreadSanitizer run of the concurrency tests is scripts/test-tsan.sh (kept
# out of CI's 30-minute budget).
# Usage: scripts/test.sh [extra cmake args for the main build...]
#        (e.g. -DCLUSTERKV_CUDA=OFF)
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
JOBS=$(nproc)

echo "== Release build: product, benchmarks, GPU code; release tests"
# No fuzz sub-build here: the sanitizer build below builds the fuzzers.
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCLUSTERKV_FUZZ=OFF "$@"
cmake --build build --target ckv_release_set
ctest --test-dir build --output-on-failure -j "$JOBS" \
  -R "$(cat build/test_sets/release.regex)"

# Sanitizer build: clang, CPU only, no benchmarks; the libFuzzer targets are
# built in it (cmake/Fuzzers.cmake: the fuzzed libraries get libFuzzer's
# coverage instrumentation and UBSan) and fuzz_smoke runs in its set.
# -O1: sanitizer builds compile much faster and still run the tests quickly.
SAN_ARGS=(-G Ninja -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O1"
          -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++
          -DCLUSTERKV_CUDA=OFF -DCLUSTERKV_BENCH=OFF)

# ASan everywhere; UBSan on the core libraries (kernels, gguf, tokenizer)
# where the arithmetic and byte parsing are, and on the fuzzed ones (model,
# chat, grammar, request validation, HTTP parser, OpenAI JSON).
echo "== AddressSanitizer (+ UndefinedBehaviorSanitizer on the core libraries)"
cmake -S . -B build-asan "${SAN_ARGS[@]}" \
  -DCLUSTERKV_SANITIZE=address -DCLUSTERKV_SANITIZE_CORE=undefined
cmake --build build-asan --target ckv_sanitize_set
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 \
UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  ctest --test-dir build-asan --output-on-failure -j "$JOBS" \
  -R "$(cat build-asan/test_sets/sanitize.regex)"
