#!/usr/bin/env bash
# Builds, here, the folder that one call on a GPU machine runs
# (docs/device-check.md): the CUDA test and benchmark binaries linked with
# CLUSTERKV_BUNDLE=ON (libstdc++, libgcc, cudart, Abseil, PCRE2 and GTest
# static; cuBLAS found on the device at run time), stripped and gzipped
# (device-check.sh unpacks them), in OUT/bin; scripts/device-check.sh as
# OUT/device-check.sh; the demo model, gzipped, in OUT/models; the engine
# benchmark's scripts in OUT/bench; OUT/MANIFEST (commit, build flags,
# files and sizes). The bundle must stay within 20 MiB (the device call
# carries it): DROP_ORDER says what goes first.
#
# Usage: scripts/device-bundle.sh [OUT]      (default: bundle)
# Environment: CKV_BUNDLE_BUILD (build folder, default build-bundle),
#   CKV_BUNDLE_JOBS (default 2), CKV_CUDA_ARCHS (default 90-real: sm_90
#   machine code only, no PTX beside it; the lent machines are H100/H200).
set -euo pipefail
cd "$(dirname "$0")/.."
OUT="${1:-bundle}"
BUILD="${CKV_BUNDLE_BUILD:-build-bundle}"
JOBS="${CKV_BUNDLE_JOBS:-2}"
ARCHS="${CKV_CUDA_ARCHS:-90-real}"
MAX_BYTES=$((20 * 1024 * 1024))

# What the device check runs. A missing required target fails the bundle;
# a missing optional one (not written yet) is a warning. cluster_bench
# comes with bench/gpu_engine_bench.sh and its plot script (the engine
# stage).
REQUIRED_TARGETS=(cuda_device_test cuda_runtime_test cuda_ops_test
  device_runtime_test backend_ops_test device_backend_test cuda_ops_bench
  link_probe)
OPTIONAL_TARGETS=(cuda_e2e_test cluster_bench)
ENGINE_FILES=(bench/gpu_engine_bench.sh bench/plot_gpu_engine.py)
# Left out, in this order, while the bundle is over the limit (with a
# warning): binaries the device stages do not run (device_backend_test
# serves only the dry run, beside cuda_e2e_test's fake cases).
DROP_ORDER=(device_backend_test)
MODEL=models/kjv-llama.gguf

# Shared libraries a bundled binary may need: the C library's and cuBLAS
# (the device has both). Anything else is copied into OUT/lib (RUNPATH
# $ORIGIN/../lib, cmake/Bundle.cmake) with a warning.
SYSTEM_LIBS='^(linux-vdso|libc|libm|libdl|libpthread|librt|ld-linux-x86-64|libcublas|libcublasLt)\.so'

warn() { echo "device-bundle: warning: $*" >&2; }
die() { echo "device-bundle: error: $*" >&2; exit 1; }

echo "== configure $BUILD (CLUSTERKV_BUNDLE=ON, sm_$ARCHS)"
mkdir -p "$BUILD"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCLUSTERKV_BUNDLE=ON -DCLUSTERKV_CUDA=ON -DCLUSTERKV_TESTS=ON \
  -DCLUSTERKV_BENCH=ON -DCLUSTERKV_FUZZ=OFF \
  -DCMAKE_CUDA_ARCHITECTURES="$ARCHS" > "$BUILD/bundle-configure.log" 2>&1 ||
  { tail -30 "$BUILD/bundle-configure.log"; die "configure failed"; }
grep -q "CUDA backend ON" "$BUILD/bundle-configure.log" ||
  die "the CUDA backend is off (no nvcc?): see $BUILD/bundle-configure.log"
grep "ClusterKV bundle:" "$BUILD/bundle-configure.log" | sed 's/^-- /   /'

targets=()
missing_optional=()
for t in "${REQUIRED_TARGETS[@]}"; do
  ninja -C "$BUILD" -t query "$t" > /dev/null 2>&1 ||
    die "required target $t is not defined"
  targets+=("$t")
done
for t in "${OPTIONAL_TARGETS[@]}"; do
  if ninja -C "$BUILD" -t query "$t" > /dev/null 2>&1; then
    targets+=("$t")
  else
    warn "optional target $t is not defined: not bundled"
    missing_optional+=("$t")
  fi
done

echo "== build (${#targets[@]} targets, -j$JOBS)"
start=$(date +%s)
cmake --build "$BUILD" -j "$JOBS" --target "${targets[@]}" \
  > "$BUILD/bundle-build.log" 2>&1 ||
  { tail -40 "$BUILD/bundle-build.log"; die "build failed: see $BUILD/bundle-build.log"; }
echo "   built in $(($(date +%s) - start)) s"

echo "== assemble $OUT"
rm -rf "$OUT"
mkdir -p "$OUT/bin" "$OUT/lib" "$OUT/models"
copied=()
unpacked_bytes=0
for t in "${targets[@]}"; do
  # The target's output file (ninja's "phony" target names it first).
  file=$(ninja -C "$BUILD" -t query "$t" | awk '/^  input: phony/ {
    getline; sub(/^ +/, ""); print; exit }')
  if [ -z "$file" ] || [ ! -x "$BUILD/$file" ]; then
    die "no executable for target $t (query gave '$file')"
  fi
  b="$OUT/bin/$t"
  cp "$BUILD/$file" "$b"
  strip --strip-unneeded "$b"
  # Direct dependencies other than the C library's and cuBLAS: copied.
  for name in $(readelf -d "$b" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
    [[ "$name" =~ $SYSTEM_LIBS ]] && continue
    [ -f "$OUT/lib/$name" ] && continue
    path=$(ldd "$b" | awk -v n="$name" '$1 == n { print $3 }')
    [ -f "$path" ] || die "$t needs $name, not found here"
    warn "$t needs $name: copied into $OUT/lib"
    cp -L "$path" "$OUT/lib/$name"
    copied+=("$name")
  done
  unpacked_bytes=$((unpacked_bytes + $(stat -c %s "$b")))
  # gzip: a third of the size; device-check.sh unpacks bin/*.gz.
  gzip -9 -n "$b"
done
rmdir "$OUT/lib" 2> /dev/null || true

cp scripts/device-check.sh "$OUT/device-check.sh"
chmod +x "$OUT/device-check.sh"
gzip -9 -n -c "$MODEL" > "$OUT/models/$(basename "$MODEL").gz"
if [ -f "$OUT/bin/cluster_bench.gz" ]; then
  mkdir -p "$OUT/bench"
  for f in "${ENGINE_FILES[@]}"; do
    if [ -f "$f" ]; then
      cp "$f" "$OUT/bench/"
    else
      warn "$f missing: the engine stage will be skipped"
    fi
  done
fi

dropped=()
for t in "${DROP_ORDER[@]}"; do
  [ "$(du -sb "$OUT" | cut -f1)" -gt "$MAX_BYTES" ] || break
  if [ -f "$OUT/bin/$t.gz" ]; then
    warn "over $MAX_BYTES bytes: $t left out"
    rm "$OUT/bin/$t.gz"
    dropped+=("$t")
  fi
done

cache() { sed -n "s/^$1:[A-Z]*=//p" "$BUILD/CMakeCache.txt"; }
{
  echo "ClusterKV device-check bundle"
  echo "made: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n)"
  echo "commit: $(git rev-parse HEAD 2> /dev/null || echo unknown)"
  dirty=$(git status --porcelain 2> /dev/null |
          wc -l)
  echo "uncommitted changes (git status): $dirty file(s)"
  git status --porcelain 2> /dev/null |
    sed 's/^/  /'
  echo "build: $BUILD, CMAKE_BUILD_TYPE=$(cache CMAKE_BUILD_TYPE)," \
       "CLUSTERKV_BUNDLE=ON"
  echo "CXX: $(cache CMAKE_CXX_COMPILER) $(cache CMAKE_CXX_FLAGS_RELEASE)"
  echo "CUDA: $(cache CMAKE_CUDA_COMPILER)" \
       "$("$(cache CMAKE_CUDA_COMPILER)" --version | tail -1)," \
       "architectures $ARCHS"
  echo "static: libstdc++ libgcc cudart Abseil PCRE2 GTest;" \
       "shared at run time: libc, cuBLAS"
  echo "copied shared libraries: ${copied[*]:-none}"
  echo "binaries: gzip -9 (device-check.sh unpacks them), $unpacked_bytes" \
       "bytes unpacked"
  echo "optional targets not bundled: ${missing_optional[*]:-none}"
  echo "left out for size: ${dropped[*]:-none}"
  echo "files (bytes path):"
  (cd "$OUT" && find . -type f ! -name MANIFEST | sort |
     xargs stat -c '  %s %n')
} > "$OUT/MANIFEST"

total=$(du -sb "$OUT" | cut -f1)
echo "total: $total bytes ($((total / 1024)) KiB) in $OUT"
(cd "$OUT" && find . -type f | sort | xargs stat -c '  %8s %n')
if [ "$total" -gt "$MAX_BYTES" ]; then
  die "the bundle is $total bytes, over the $MAX_BYTES-byte limit"
fi
