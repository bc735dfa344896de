#!/usr/bin/env bash
# Prints the Debian packages that own the shared libraries the given
# executables load (ldd), one per line, sorted: what the runtime stage of an
# image must install. Libraries no package owns (e.g. a CUDA toolkit under
# /usr/local/cuda) are reported on stderr and left out.
# Usage: deploy/runtime-packages.sh BINARY...
set -euo pipefail

owner() {  # the package of one library path; usrmerge: try both spellings
  local f=$1 real
  real=$(realpath "$f")
  for p in "$f" "$real" "${f#/usr}" "/usr$f" "${real#/usr}" "/usr$real"; do
    if out=$(dpkg -S "$p" 2>/dev/null); then
      echo "${out%%:*}"
      return 0
    fi
  done
  echo "runtime-packages: no package owns $f" >&2
}

for bin in "$@"; do
  ldd "$bin" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }'
done | sort -u | while read -r lib; do owner "$lib"; done | sort -u
