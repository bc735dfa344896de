#!/usr/bin/env bash
# Prints the Debian packages an image's build stage installs, one per line:
# scripts/setup.sh's PACKAGES (the one list of the project's packages, so a
# package added there reaches the images' builds too) less the tools only
# tests and benchmarks run, which are large and compile nothing: the browser,
# Prometheus, nginx, clang (sanitizer/fuzzer builds) and matplotlib.
# Usage: deploy/build-packages.sh [SETUP_SH]   (default scripts/setup.sh)
set -euo pipefail
setup=${1:-$(dirname "$0")/../scripts/setup.sh}
TEST_ONLY=" chromium prometheus nginx clang libclang-rt-dev python3-matplotlib "

# The PACKAGES=( ... ) array only, evaluated by bash: setup.sh itself would
# install right away.
list=$(sed -n '/^PACKAGES=(/,/^)/p' "$setup")
[ -n "$list" ] || { echo "build-packages: no PACKAGES=( ) in $setup" >&2; exit 1; }
eval "$list"
for p in "${PACKAGES[@]}"; do
  [[ $TEST_ONLY == *" $p "* ]] || echo "$p"
done
