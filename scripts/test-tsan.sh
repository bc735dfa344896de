#!/usr/bin/env bash
# The scheduler, store, pool and fake-device concurrency tests (ctest label
# `concurrency`) under ThreadSanitizer. Not part of scripts/test.sh: CI's
# 30-minute budget holds the Release and ASan+UBSan stages; run this after
# changing locking, the engine loop, the ClusterWorker or the thread pools.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=Release \
  "-DCMAKE_CXX_FLAGS_RELEASE=-O1" -DCLUSTERKV_CUDA=OFF -DCLUSTERKV_BENCH=OFF \
  -DCLUSTERKV_FUZZ=OFF -DCLUSTERKV_SANITIZE=thread
cmake --build build-tsan --target kernels_thread_pool_test kv_store_test \
  kv_policy_test engine_loop_test blocking_pool_test device_runtime_test \
  device_backend_test backend_ops_test pinned_arena_test
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
  ctest --test-dir build-tsan --output-on-failure -L concurrency -j "$(nproc)"
