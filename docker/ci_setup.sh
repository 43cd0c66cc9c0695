#!/usr/bin/env bash
# Make a Docker engine and the CPU sandbox test image available (CI, or a fresh dev machine), and
# headless Chromium for the batch report's browser test: installs chromium if it is missing,
# installs docker.io if the CLI is missing, starts dockerd (no iptables, no default bridge:
# sandbox containers use --network none) unless an engine already answers, waits for it,
# then builds kernel-loop-sandbox:cpu-test with docker/build_test_image.sh (cached, offline).
# Run as root. Environment: DOCKERD_LOG (default /tmp/kloop-dockerd.log), DOCKERD_WAIT_S (60).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
LOG=${DOCKERD_LOG:-/tmp/kloop-dockerd.log}
WAIT_S=${DOCKERD_WAIT_S:-60}

say() { printf '[ci_setup] %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

[ "$(id -u)" = 0 ] || die "run as root (installs packages, starts dockerd)"
started=$(date +%s)

if ! command -v dockerd >/dev/null || ! command -v docker >/dev/null; then
    say "installing docker.io"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q docker.io >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q docker.io >/dev/null; }
fi

if ! command -v chromium >/dev/null; then
    say "installing chromium (the batch report's browser test)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get install -y -q chromium fonts-dejavu-core >/dev/null 2>&1 || { apt-get update -q >/dev/null && apt-get install -y -q chromium fonts-dejavu-core >/dev/null; }
fi

if docker info >/dev/null 2>&1; then
    say "a Docker engine is already running"
else
    say "starting dockerd (log: $LOG)"
    nohup dockerd --iptables=false --bridge=none >"$LOG" 2>&1 &
    for _ in $(seq "$WAIT_S"); do
        docker info >/dev/null 2>&1 && break
        kill -0 $! 2>/dev/null || { tail -n 20 "$LOG" >&2; die "dockerd exited"; }
        sleep 1
    done
    docker info >/dev/null 2>&1 || { tail -n 20 "$LOG" >&2; die "dockerd did not answer within ${WAIT_S} s"; }
    say "dockerd is up"
fi

"$HERE/build_test_image.sh"
say "ready in $(( $(date +%s) - started )) s"
