#!/usr/bin/env bash
# Copy this machine's node into the build context (no registry, no download). It must be a
# single binary needing only glibc and libstdc++ (both in runner/base), as the official builds
# are; Debian's own nodejs links libnode and is refused with the reason.
#   usage: prepare.sh CONTEXT_DIR   (NODE: the node binary, default: the one on PATH)
set -euo pipefail
ctx=${1:?usage: prepare.sh CONTEXT_DIR}
node=${NODE:-$(command -v node || true)}
if [ -z "$node" ] || [ ! -x "$node" ]; then
  echo "node: no node binary on this machine (set NODE=/path/to/node)" >&2; exit 3
fi
node=$(readlink -f "$node")
if ldd "$node" 2>/dev/null | grep -Eq 'libnode|not found'; then
  echo "node: $node needs shared libraries that runner/base lacks (libnode): use an official node build" >&2; exit 3
fi
cp "$node" "$ctx/node"
echo "node: copied $node ($("$node" --version))"
