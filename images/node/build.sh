#!/usr/bin/env bash
# Build runner/node:latest FROM runner/base without any network: the host's node binary is
# copied into a temporary build context. usage: images/node/build.sh [NODE_BINARY]
set -euo pipefail
node=${1:-$(command -v node || true)}
[ -n "$node" ] && [ -x "$node" ] || { echo "node: no node binary on this machine (give its path)" >&2; exit 1; }
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
cp "$(dirname "$0")/Dockerfile" "$ctx/"
cp "$(readlink -f "$node")" "$ctx/node"
docker build --pull=false -t runner/node:latest "$ctx"
