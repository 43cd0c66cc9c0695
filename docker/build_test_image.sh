#!/usr/bin/env bash
# Build the CPU sandbox image for tests and CI without any image registry:
#   1. a Debian bookworm root filesystem (debootstrap minbase + python3.11 + venv) with torch
#      (CPU wheel) and the harness's runtime deps installed offline from a host-side wheelhouse,
#      cached as a tarball keyed by everything that goes into it;
#   2. `docker import` of that tarball as the base image (skipped when the base is current);
#   3. `docker build` of docker/Dockerfile FROM that base, with no network (layer cache: fast).
# Idempotent: a second run with nothing changed takes seconds. Run as root (debootstrap, chroot).
#
# Environment: KLOOP_DOCKER_CACHE (cache dir), KLOOP_TEST_BASE / KLOOP_TEST_IMAGE (tags),
# TORCH_WHEEL (a cp311 torch CPU wheel; default: the one in /opt/wheels, else pip download),
# DEBIAN_MIRROR.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(dirname "$HERE")
CACHE=${KLOOP_DOCKER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kernel-loop/docker}
BASE_TAG=${KLOOP_TEST_BASE:-kernel-loop-base:cpu-test}
IMAGE_TAG=${KLOOP_TEST_IMAGE:-kernel-loop-sandbox:cpu-test}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm                      # Python 3.11: the torch wheel is cp311
PACKAGES=python3,python3-venv
TORCH_VERSION=2.13.0
RECIPE_VERSION=1                    # bump when the recipe below changes
# glibc 2.36 in bookworm; listed one by one (older pips do not expand manylinux tags themselves)
PLATFORMS="--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64
 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_12_x86_64
 --platform manylinux2010_x86_64 --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64"

say() { printf '[build_test_image] %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (debootstrap and chroot need it)"
command -v docker >/dev/null || die "the docker CLI is missing: apt-get install -y docker.io"
docker info >/dev/null 2>&1 || die "no Docker engine answers: start one with 'dockerd --iptables=false --bridge=none &' (or docker/ci_setup.sh)"
command -v debootstrap >/dev/null || { say "installing debootstrap"; apt-get install -y -q debootstrap >/dev/null; }
mkdir -p "$CACHE/debs" "$CACHE/wheels"
started=$(date +%s)

# ---------------------------------------------------------------- the wheelhouse (host side)
if [ -z "${TORCH_WHEEL:-}" ]; then
    TORCH_WHEEL=$(ls /opt/wheels/torch-${TORCH_VERSION}+cpu-cp311-*.whl 2>/dev/null | head -n1 || true)
fi
if [ -z "$TORCH_WHEEL" ]; then
    TORCH_WHEEL=$(ls "$CACHE"/wheels/torch-${TORCH_VERSION}+cpu-cp311-*.whl 2>/dev/null | head -n1 || true)
fi
if [ -z "$TORCH_WHEEL" ]; then
    say "downloading the torch ${TORCH_VERSION} CPU wheel"
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 $PLATFORMS \
        --index-url https://download.pytorch.org/whl/cpu --dest "$CACHE/wheels" "torch==${TORCH_VERSION}+cpu"
    TORCH_WHEEL=$(ls "$CACHE"/wheels/torch-${TORCH_VERSION}+cpu-cp311-*.whl | head -n1)
fi
REQUIREMENTS="$HERE/requirements-harness.txt"
KEY=$( { echo "$RECIPE_VERSION $SUITE $PACKAGES $(basename "$TORCH_WHEEL")"; grep -v '^#' "$REQUIREMENTS"; } | sha256sum | cut -c1-16)
TARBALL="$CACHE/rootfs-$KEY.tar"

if [ ! -s "$TARBALL" ]; then
    WHEELS="$CACHE/wheels-$KEY"
    if [ ! -f "$WHEELS/.complete" ]; then
        say "collecting wheels for Python 3.11 into $WHEELS"
        rm -rf "$WHEELS" && mkdir -p "$WHEELS"
        cp "$TORCH_WHEEL" "$WHEELS/"
        python3 -m pip download -q --only-binary=:all: --python-version 3.11 --implementation cp $PLATFORMS --dest "$WHEELS" "$WHEELS/$(basename "$TORCH_WHEEL")" -r "$REQUIREMENTS"
        touch "$WHEELS/.complete"
    fi

    # ------------------------------------------------------------ the root filesystem
    ROOTFS=$(mktemp -d "$CACHE/rootfs-XXXXXX")
    cleanup() {
        mountpoint -q "$ROOTFS/proc" && umount "$ROOTFS/proc"
        mountpoint -q "$ROOTFS/wheels" && umount "$ROOTFS/wheels"
        rm -rf "$ROOTFS"
    }
    trap cleanup EXIT
    say "debootstrap $SUITE (minbase + $PACKAGES) from $MIRROR"
    debootstrap --variant=minbase --include="$PACKAGES" --cache-dir="$CACHE/debs" "$SUITE" "$ROOTFS" "$MIRROR" \
        > "$CACHE/debootstrap.log" 2>&1 || { tail -n 30 "$CACHE/debootstrap.log" >&2; die "debootstrap failed (log: $CACHE/debootstrap.log)"; }
    mount -t proc proc "$ROOTFS/proc"
    mkdir -p "$ROOTFS/wheels" && mount --bind "$WHEELS" "$ROOTFS/wheels"
    say "installing torch and the harness deps offline into /opt/kloop/venv"
    # A clean environment: the host's PIP_* settings (indexes, find-links, constraints) stay outside.
    in_root() { chroot "$ROOTFS" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 "$@"; }
    in_root /usr/bin/python3 -m venv /opt/kloop/venv
    in_root /opt/kloop/venv/bin/pip install -q --no-index --find-links /wheels --no-cache-dir \
        "/wheels/$(basename "$TORCH_WHEEL")" $(grep -v '^#' "$REQUIREMENTS" | tr '\n' ' ')
    in_root /opt/kloop/venv/bin/python -c "import torch, pydantic, structlog, filelock, psutil; print('torch', torch.__version__)" >&2
    umount "$ROOTFS/wheels" && rmdir "$ROOTFS/wheels"
    umount "$ROOTFS/proc"
    # Slim: package caches, docs, manuals, locales (not needed in a sandbox).
    rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/usr/share/doc/* \
        "$ROOTFS"/usr/share/man/* "$ROOTFS"/usr/share/locale/* "$ROOTFS"/root/.cache
    say "packing the root filesystem"
    tar -C "$ROOTFS" --numeric-owner -cf "$TARBALL.tmp" . && mv "$TARBALL.tmp" "$TARBALL"
    cleanup
    trap - EXIT
    # Older tarballs of this recipe are stale now.
    find "$CACHE" -maxdepth 1 -name 'rootfs-*.tar' ! -name "rootfs-$KEY.tar" -delete
fi

# ---------------------------------------------------------------- base image and sandbox image
if [ "$(docker image inspect -f '{{ index .Config.Labels "kernel-loop.rootfs" }}' "$BASE_TAG" 2>/dev/null || true)" != "$KEY" ]; then
    say "docker import -> $BASE_TAG"
    docker import --change "LABEL kernel-loop.rootfs=$KEY" --change 'CMD ["/bin/sh"]' "$TARBALL" "$BASE_TAG" >/dev/null
fi
say "docker build docker/Dockerfile FROM $BASE_TAG -> $IMAGE_TAG"
BUILD_LOG="$CACHE/docker-build.log"
# The label lets tests notice an image built from other harness sources (same digest as
# sandbox.backends.docker_image.source_digest).
SOURCE=$(cd "$ROOT" && find kloop_runtime sandbox problems docker/Dockerfile docker/provision.sh docker/requirements-harness.txt -type f \
    ! -name '*.pyc' ! -path '*/__pycache__/*' | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16)
DOCKER_BUILDKIT=0 docker build --network none --build-arg "BASE_IMAGE=$BASE_TAG" --label "kernel-loop.source=$SOURCE" \
    -f "$HERE/Dockerfile" -t "$IMAGE_TAG" "$ROOT" \
    > "$BUILD_LOG" 2>&1 || { tail -n 30 "$BUILD_LOG" >&2; die "docker build failed (log: $BUILD_LOG)"; }
# Earlier builds of the tag, now untagged, are garbage.
docker image prune -f --filter "label=kernel-loop.image=sandbox" >/dev/null 2>&1 || true
say "done in $(( $(date +%s) - started )) s: $IMAGE_TAG"
