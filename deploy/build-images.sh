#!/usr/bin/env bash
# Builds the container images with buildah: no Docker daemon, no image
# registry needed (run as root on Debian 12; see deploy/README.md).
#
#   deploy/build-images.sh [base] [cpu] [cuda-check] [cuda]   (default: cpu)
#
#   base        only the base images (below); every target makes them first
#   cpu         deploy/Dockerfile.cpu -> clusterkv-server:cpu
#   cuda-check  deploy/Dockerfile.cuda's build stage -> clusterkv-server:cuda-build
#   cuda        deploy/Dockerfile.cuda -> clusterkv-server:cuda
#               (the toolkit: NVIDIA's repository, else a local one: cuda_args)
#
# Steps: installs buildah and debootstrap when missing (apt); makes the base
# images debian:12 and debian:12-slim when they are not in buildah's store and
# the registry is unreachable (debootstrap --variant=minbase bookworm from
# Debian's mirror, as Docker's Debian images are made); builds with
# `buildah bud --isolation chroot --network host` under `nice -n 15` (the
# build compiles the project); prints the images' sizes.
#
# Environment:
#   DEBIAN_MIRROR  mirror for debootstrap (default http://deb.debian.org/debian)
#   JOBS           compile jobs in the image build (default: 2)
#   CUDA_REPO      NVIDIA's CUDA repository (default: the debian12/x86_64 one)
#   CUDA_HOME      a local CUDA toolkit, used when CUDA_REPO is unreachable
#                  (default /usr/local/cuda)
#   HOST_CCACHE    a ccache directory on this machine, mounted read-only as
#                  the build's compiler cache (e.g. ~/.cache/ccache after a
#                  Release build of this checkout); unset: the build's own
#                  cache mount (kept by buildah between builds)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
JOBS=${JOBS:-2}
NICE=(nice -n 15)
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(cpu)

log() { echo "build-images: $*" >&2; }

need_tools() {
  local missing=()
  command -v buildah >/dev/null || missing+=(buildah)
  command -v debootstrap >/dev/null || missing+=(debootstrap)
  [ ${#missing[@]} -eq 0 ] && return 0
  [ "$(id -u)" -eq 0 ] || { log "need root to install ${missing[*]}"; exit 1; }
  log "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    --no-install-recommends "${missing[@]}" >/dev/null
}

have_image() { buildah inspect --type image "$1" >/dev/null 2>&1; }

# A Debian 12 root file system in $1, as the official images have it: the
# minbase variant, bookworm + updates + security sources, no apt caches.
bootstrap() {
  local dir=$1
  log "debootstrap --variant=minbase bookworm $dir $MIRROR"
  "${NICE[@]}" debootstrap --variant=minbase bookworm "$dir" "$MIRROR" \
    > "$dir.log" 2>&1 || { tail -20 "$dir.log" >&2; exit 1; }
  rm -f "$dir/etc/apt/sources.list"
  cat > "$dir/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: ${MIRROR%/debian}/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  printf 'Acquire::Languages "none";\n' > "$dir/etc/apt/apt.conf.d/docker-no-languages"
  # No package caches in image layers: no .deb kept after installing, no
  # pkgcache.bin/srcpkgcache.bin (70 MB) written by apt-get update.
  cat > "$dir/etc/apt/apt.conf.d/docker-clean" <<'EOF'
APT::Keep-Downloaded-Packages "false";
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
EOF
  rm -rf "$dir"/var/lib/apt/lists/* "$dir"/var/cache/apt/*.bin \
         "$dir"/var/cache/apt/archives/*.deb "$dir"/var/log/* "$dir"/tmp/*
}

# The slim variant: what Docker's -slim images leave out (documentation but
# the copyright files, man pages, info, locales), for later installs too.
slimify() {
  local dir=$1
  cat > "$dir/etc/dpkg/dpkg.cfg.d/docker" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
EOF
  find "$dir/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
  find "$dir/usr/share/doc" -mindepth 1 -type d -empty -delete
  rm -rf "$dir"/usr/share/man/* "$dir"/usr/share/groff/* "$dir"/usr/share/info/* \
         "$dir"/usr/share/lintian/* "$dir"/usr/share/linda/* "$dir"/usr/share/locale/*
}

# Tags the tree in $1 as image $2 (what `podman import` does).
import_tree() {
  local dir=$1 tag=$2 ctr
  ctr=$(buildah from scratch)
  tar -C "$dir" -cf "$dir.tar" .
  buildah add "$ctr" "$dir.tar" / >/dev/null
  rm -f "$dir.tar"
  buildah config --cmd /bin/bash --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$ctr"
  buildah commit --quiet --rm "$ctr" "$tag" >/dev/null
  log "made $tag"
}

base_images() {
  if have_image debian:12 && have_image debian:12-slim; then
    log "base images debian:12 and debian:12-slim present"
    return 0
  fi
  if timeout 60 buildah pull --quiet docker.io/library/debian:12 >/dev/null 2>&1 &&
     timeout 60 buildah pull --quiet docker.io/library/debian:12-slim >/dev/null 2>&1; then
    log "pulled debian:12 and debian:12-slim"
    return 0
  fi
  log "registry unreachable: making the base images with debootstrap"
  local work
  work=$(mktemp -d /var/tmp/ckv-debootstrap.XXXXXX)
  trap 'rm -rf "$work"' RETURN
  bootstrap "$work/rootfs"
  import_tree "$work/rootfs" debian:12
  slimify "$work/rootfs"
  import_tree "$work/rootfs" debian:12-slim
}

bud() {  # bud DOCKERFILE TAG [buildah bud options...]
  local file=$1 tag=$2
  shift 2
  local ccache=()
  if [ -n "${HOST_CCACHE:-}" ]; then
    ccache=(--volume "$(realpath "$HOST_CCACHE"):/ccache-host:ro"
            --build-arg CCACHE_DIR=/ccache-host --build-arg CCACHE_READONLY=1)
  fi
  log "buildah bud -f $file -t $tag (nice -n 15, $JOBS jobs)"
  "${NICE[@]}" buildah bud --isolation chroot --network host --layers --format docker \
    --build-arg BUILD_JOBS="$JOBS" "${ccache[@]}" \
    -f "$ROOT/$file" -t "$tag" "$@" "$ROOT"
}

build_cpu() {
  local t0=$SECONDS
  bud deploy/Dockerfile.cpu clusterkv-server:cpu
  log "clusterkv-server:cpu built in $((SECONDS - t0)) s"
}

# Dockerfile.cuda takes the toolkit from NVIDIA's apt repository. When that
# is unreachable and a toolkit is installed here (CUDA_HOME, default
# /usr/local/cuda, with bin/nvcc), it is mounted into the build instead
# (CUDA_TOOLKIT=mounted). cuda-check builds the build stage (compiles the
# CUDA backend); cuda builds the whole image. Without either, the build stops
# at the toolkit's download, which this reports.
cuda_args() {
  local repo=${CUDA_REPO:-https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64}
  local home=${CUDA_HOME:-/usr/local/cuda}
  CUDA_BUD_ARGS=(--build-arg "CUDA_REPO=$repo")
  if timeout 15 curl -fsI "$repo/cuda-keyring_1.1-1_all.deb" >/dev/null 2>&1; then
    log "CUDA toolkit from $repo (apt)"
  elif [ -x "$home/bin/nvcc" ]; then
    log "$repo unreachable: CUDA toolkit mounted from $(realpath "$home")"
    CUDA_BUD_ARGS+=(--build-arg CUDA_TOOLKIT=mounted
                    --volume "$(realpath "$home"):/usr/local/cuda:ro")
  else
    log "$repo unreachable and no toolkit at $home: the build stops at the" \
        "toolkit's download"
  fi
}

build_cuda() {  # build_cuda TAG [--target build]
  local tag=$1 t0=$SECONDS
  shift
  cuda_args
  bud deploy/Dockerfile.cuda "$tag" "${CUDA_BUD_ARGS[@]}" "$@" || return 1
  log "$tag built in $((SECONDS - t0)) s"
}

sizes() {
  log "image sizes:"
  buildah images --format '{{.Name}}:{{.Tag}} {{.Size}}' |
    grep -E 'debian|clusterkv' >&2 || true
}

need_tools
base_images
status=0
for t in "${TARGETS[@]}"; do
  case $t in
    base) ;;
    cpu) build_cpu ;;
    cuda-check) build_cuda clusterkv-server:cuda-build --target build || status=1 ;;
    cuda) build_cuda clusterkv-server:cuda || status=1 ;;
    *) log "unknown target $t (base, cpu, cuda-check, cuda)"; exit 2 ;;
  esac
done
sizes
exit $status
