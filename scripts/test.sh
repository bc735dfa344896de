#!/usr/bin/env bash
# The README's test command: installs packages, configures, builds, runs all tests.
# Usage: scripts/test.sh [extra cmake args...]   (e.g. -DCLUSTERKV_CUDA=OFF)
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
BUILD_DIR=build
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@"
cmake --build "$BUILD_DIR"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$(nproc)"
