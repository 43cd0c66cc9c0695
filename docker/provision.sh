#!/bin/sh
# Provision the sandbox image's Python at /opt/kloop/venv: reuse what the base image already
# has (the CPU test base ships Python 3.11 + torch + the harness deps), install what it lacks
# (a CUDA base gets python3, a venv, torch from TORCH_INDEX_URL and the harness deps).
set -eu
VENV=/opt/kloop/venv
REQUIREMENTS=/opt/kloop/requirements-harness.txt

if [ ! -x "$VENV/bin/python" ]; then
    if ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
        apt-get update
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
            python3 python3-venv python3-dev ca-certificates
        rm -rf /var/lib/apt/lists/*
    fi
    python3 -m venv "$VENV"
fi
PY="$VENV/bin/python"

if ! "$PY" -c 'import torch' >/dev/null 2>&1; then
    # shellcheck disable=SC2086 # TORCH_REQUIREMENT may name several packages
    "$PY" -m pip install --no-cache-dir --index-url "$TORCH_INDEX_URL" $TORCH_REQUIREMENT
fi
# Offline first: succeeds without any index when the base already satisfies everything.
"$PY" -m pip install --no-cache-dir --no-index -r "$REQUIREMENTS" >/dev/null 2>&1 \
    || "$PY" -m pip install --no-cache-dir -r "$REQUIREMENTS"

command -v timeout >/dev/null || { echo "provision: coreutils' timeout is missing from the base image" >&2; exit 1; }
"$PY" -c 'import sys, torch; print("provisioned python", sys.version.split()[0], "torch", torch.__version__)'
