#!/usr/bin/env bash
# Installs every Debian package the build, tests and benchmarks need.
# Idempotent and non-interactive: packages already present are skipped.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config ccache clang libclang-rt-dev
  libabsl-dev libpcre2-dev libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libopenblas-dev libspdlog-dev libfmt-dev
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  prometheus-cpp-dev prometheus python3 python3-matplotlib
  nginx python3-yaml python3-grpcio python3-protobuf curl openssl
  python3-pip python3-setuptools python3-wheel python3-venv python3-pytest
  libcpp-httplib-dev libboost-dev libssl-dev
  libhwy-dev
  python3-jsonschema python3-numpy
  bible-kjv
  chromium
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" \
    || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# Packages such as nginx and prometheus start services on install; tests run
# their own instances, so forbid service starts during the install.
POLICY=/usr/sbin/policy-rc.d
ADDED_POLICY=0
if [ ! -e "$POLICY" ]; then
  printf '#!/bin/sh\nexit 101\n' | $SUDO tee "$POLICY" >/dev/null
  $SUDO chmod +x "$POLICY"
  ADDED_POLICY=1
fi
cleanup() { [ "$ADDED_POLICY" = 1 ] && $SUDO rm -f "$POLICY"; true; }
trap cleanup EXIT
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
