#!/usr/bin/env bash
# Run by hand, NOT part of ctest or CI: it needs root (debootstrap, chroot,
# mount) and the network (deb.debian.org).
#
# Proves that the device-check bundle (scripts/device-bundle.sh) needs none
# of this project's dev packages: builds a minimal Debian 12 root
# (debootstrap --variant=minbase bookworm; debootstrap is installed with
# apt-get when missing), copies the bundle into it as /bundle, gives it
# what the GPU machine has and the bundle does not carry (cuBLAS: this
# machine's CUDA toolkit lib folder, bind-mounted read-only at
# /usr/local/cuda/lib64; /proc and /dev), and runs
#   chroot ROOT /bundle/device-check.sh /bundle --dry-run
# The test passes only if that dry run passes. The root also must not hold
# any dev package (Abseil, GTest, PCRE2, libstdc++ headers, CUDA).
#
# Usage: sudo tests/deploy/bundle_root_test.sh [BUNDLE]   (default: bundle)
# Environment: CKV_ROOT_DIR (default: a new folder under /tmp, removed at
#   the end), CKV_KEEP_ROOT=1 keeps it (a later run with the same
#   CKV_ROOT_DIR reuses it instead of bootstrapping again),
#   CKV_DEBIAN_MIRROR (default http://deb.debian.org/debian).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
BUNDLE="$(cd "${1:-bundle}" 2> /dev/null && pwd)" || {
  echo "bundle_root_test: no bundle at ${1:-bundle}:" \
       "run scripts/device-bundle.sh first" >&2
  exit 2
}
MIRROR="${CKV_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
ROOT="${CKV_ROOT_DIR:-}"
KEEP="${CKV_KEEP_ROOT:-}"
[ -n "$ROOT" ] || ROOT="$(mktemp -d /tmp/ckv-bundle-root.XXXXXX)"
MOUNTS=()
t0=$(date +%s)

say() { echo "bundle_root_test: $*"; }
die() { say "FAIL: $*"; exit 1; }

cleanup() {
  local i
  for ((i = ${#MOUNTS[@]} - 1; i >= 0; i--)); do
    umount "${MOUNTS[i]}" 2> /dev/null || umount -l "${MOUNTS[i]}"
  done
  if [ -z "$KEEP" ]; then
    rm -rf --one-file-system "$ROOT"
  else
    say "root kept in $ROOT"
  fi
}
trap cleanup EXIT

[ "$(id -u)" -eq 0 ] || die "needs root (debootstrap, chroot, mount)"
if ! command -v debootstrap > /dev/null; then
  say "installing debootstrap"
  { apt-get update -q && apt-get install -y -q debootstrap; } > /dev/null ||
    die "cannot install debootstrap"
fi

if [ -f "$ROOT/etc/debian_version" ] && [ -x "$ROOT/bin/bash" ]; then
  say "reusing the root in $ROOT (Debian $(cat "$ROOT/etc/debian_version"))"
else
  say "debootstrap --variant=minbase bookworm $ROOT"
  debootstrap --variant=minbase bookworm "$ROOT" "$MIRROR" \
    > "$ROOT.debootstrap.log" 2>&1 ||
    { tail -20 "$ROOT.debootstrap.log"; die "debootstrap failed"; }
  rm -f "$ROOT.debootstrap.log"
fi
t_root=$(date +%s)

# None of the project's dev packages may be there.
# shellcheck disable=SC2016  # dpkg-query's format, not the shell's
dev=$(chroot "$ROOT" dpkg-query -W -f '${Package}\n' 2> /dev/null |
  grep -E '^(libabsl|libgtest|libgmock|libpcre2-dev|libstdc\+\+-.*-dev|cuda|libcublas|nvidia|libspdlog|libfmt)' ||
  true)
[ -z "$dev" ] || die "the root holds dev packages: $dev"
say "root: $(chroot "$ROOT" dpkg-query -W | wc -l) packages, none of the" \
    "project's dev packages"

# cuBLAS, as the GPU machine has it (the bundle does not carry it).
cublas=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib \
         /usr/local/cuda/targets/x86_64-linux/lib; do
  if ls "$d"/libcublas.so.* > /dev/null 2>&1; then
    cublas="$(readlink -f "$d")"
    break
  fi
done
[ -n "$cublas" ] || die "no cuBLAS on this machine to give the root"
bind() {  # bind SRC DST [ro]
  mkdir -p "$2"
  mount --bind "$1" "$2" || die "mount --bind $1 $2"
  MOUNTS+=("$2")
  if [ "${3:-}" = ro ]; then
    mount -o remount,bind,ro "$2" || die "remount read-only $2"
  fi
}
bind "$cublas" "$ROOT/usr/local/cuda/lib64" ro
mount -t proc proc "$ROOT/proc" && MOUNTS+=("$ROOT/proc")
bind /dev "$ROOT/dev"

rm -rf "$ROOT/bundle"
cp -a "$BUNDLE" "$ROOT/bundle"
rm -rf "$ROOT/bundle/results"

say "chroot $ROOT /bundle/device-check.sh /bundle --dry-run"
t_run=$(date +%s)
timeout 600 chroot "$ROOT" /usr/bin/env -i \
  PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  HOME=/root LANG=C.UTF-8 /bundle/device-check.sh /bundle --dry-run
rc=$?
t_end=$(date +%s)
mkdir -p "$BUNDLE/results"
cp "$ROOT/bundle/results/device-check.json" \
  "$BUNDLE/results/root-dry-run.json" 2> /dev/null
say "root $((t_root - t0)) s, dry run $((t_end - t_run)) s," \
    "total $((t_end - t0)) s"
[ "$rc" -eq 0 ] || die "the dry run in the minimal root failed (exit $rc)"
say "PASS: the bundle's dry run passes in a minimal Debian 12 root"
