#!/usr/bin/env bash
# Put the lupa wheel (Lua for the Lua custom tools, TOOLS.md "Custom tools") into the build
# context, fetched with this machine's own pip and cached, so the Dockerfile needs no network.
# The sandbox's python3 is Debian bookworm's 3.11: the wheel is chosen for it, not for the host.
#   usage: prepare.sh CONTEXT_DIR   (PYTHON: a python with pip; RUNNER_CACHE_DIR: the cache)
set -euo pipefail
ctx=${1:?usage: prepare.sh CONTEXT_DIR}
lupa_version=2.8
cache=${RUNNER_CACHE_DIR:-$HOME/.cache/runner}/wheels
mkdir -p "$cache"
if ! ls "$cache"/lupa-"$lupa_version"-cp311-*manylinux*"$(uname -m)"*.whl >/dev/null 2>&1; then
  "${PYTHON:-python3}" -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 \
    --implementation cp --platform "manylinux2014_$(uname -m)" -d "$cache" "lupa==$lupa_version"
fi
mkdir -p "$ctx/wheels"
cp "$cache"/lupa-"$lupa_version"-cp311-*manylinux*"$(uname -m)"*.whl "$ctx/wheels/"
echo "base: lupa $lupa_version wheel in the build context"
