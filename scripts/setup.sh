#!/usr/bin/env bash
# One-command set-up for a fresh Debian machine (as root), idempotent: a second run takes seconds.
#   - .venv/ with runner installed (editable) and its test dependencies
#   - the Debian packages runner and its tests use (docker.io, debootstrap, busybox-static, tmux, ...)
#   - a Docker engine: used as it is when `docker info` answers, else dockerd is started
#   - crun and gVisor's runsc registered as the engine's runtimes (crun only where it runs here)
#   - the sandbox images, built offline (runner images build)
# Usage: scripts/setup.sh [--no-images]
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf 'setup: %s\n' "$*" >&2; }
die() { printf 'setup: %s\n' "$*" >&2; exit 1; }

DOCKERD_LOG=${RUNNER_DOCKERD_LOG:-/var/log/runner-dockerd.log}
PACKAGES=(docker.io crun debootstrap busybox-static openssh-server openssh-client iproute2 procps runsc postgresql tmux)

# 1. Debian packages ------------------------------------------------------------------------
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    die "missing packages: ${missing[*]}. This set-up installs them only as root on Debian; install them by hand (for example: sudo apt-get install ${missing[*]}) and run it again."
  fi
  say "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
fi

# 2. Python environment -----------------------------------------------------------------------
python=${PYTHON:-python3}
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || die "runner needs Python 3.11 or newer ($python is $("$python" -V 2>&1))"
stamp=.venv/.runner-installed-compat  # named for the install mode: a venv of an older mode is redone
if [ ! -x .venv/bin/python ] || [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  say "creating .venv and installing runner with its test dependencies, lupa (Lua tools), inspect_ai (its sandbox provider) and runner serve's libraries"
  [ -x .venv/bin/python ] || "$python" -m venv .venv
  # editable_mode=compat: the editable install is one path in a .pth file. The default mode
  # installs an import finder that site runs at every start of Python, importing pathlib and
  # importlib.util with it: 20 ms of every `runner` command (DESIGN.md, speed).
  .venv/bin/pip install -q -e '.[test,lua,inspect,serve,e2b,e2b-test]' --config-settings editable_mode=compat >&2
  touch "$stamp"
fi

# 3. Docker engine -----------------------------------------------------------------------------
# crun (runner's runtime where the engine offers it: executors/docker/runtimes.py) refuses to run on
# cgroups in hybrid mode while the unified (v2) hierarchy holds a controller. A machine whose init
# mounted every v1 controller but one (here hugetlb) has it there: mount that one as v1 too, as
# systemd does in hybrid mode. Before dockerd starts, so its containers' cgroups are made alike.
if [ "$(id -u)" = 0 ] && [ -r /sys/fs/cgroup/unified/cgroup.controllers ]; then
  for c in $(cat /sys/fs/cgroup/unified/cgroup.controllers); do
    if ! mountpoint -q "/sys/fs/cgroup/$c"; then
      if mkdir -p "/sys/fs/cgroup/$c" 2>/dev/null && mount -t cgroup -o "$c" cgroup "/sys/fs/cgroup/$c"; then
        say "mounted the $c cgroup controller (v1) beside the others, for crun (cgroups in hybrid mode)"
      else
        say "could not mount the $c cgroup controller (v1): crun will not run here (checked below)"
      fi
    fi
  done
fi
if docker info >/dev/null 2>&1; then
  say "Docker engine answers: using it"
  if [ "$(docker info --format '{{.ExperimentalBuild}}' 2>/dev/null)" != "true" ]; then
    say "the engine runs without \"experimental\": true, so snapshots cannot checkpoint processes (docker checkpoint); add it to /etc/docker/daemon.json and restart dockerd to have them"
  fi
else
  [ "$(id -u)" = 0 ] || die "no Docker engine answers and starting one needs root: start dockerd (or Docker Desktop) yourself"
  command -v dockerd >/dev/null || die "dockerd is missing: apt-get install docker.io"
  say "starting dockerd in the background; its log is $DOCKERD_LOG"
  # A pid file left by a dockerd that died with the last session would stop a new one.
  if [ -f /var/run/docker.pid ] && ! kill -0 "$(cat /var/run/docker.pid)" 2>/dev/null; then rm -f /var/run/docker.pid; fi
  if ! pgrep -x containerd >/dev/null && [ -S /run/containerd/containerd.sock ]; then rm -f /run/containerd/containerd.sock; fi
  # "experimental": docker checkpoint (a snapshot's processes, under gVisor) needs it; read at start only.
  python3 - <<'PY'
import json, os
path = "/etc/docker/daemon.json"
cfg = json.load(open(path)) if os.path.exists(path) and os.path.getsize(path) else {}
if cfg.get("experimental") is not True:
    cfg["experimental"] = True
    os.makedirs("/etc/docker", exist_ok=True)
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2)
PY
  nohup setsid dockerd >>"$DOCKERD_LOG" 2>&1 </dev/null &
  for _ in $(seq 1 120); do
    docker info >/dev/null 2>&1 && break
    sleep 0.5
  done
  docker info >/dev/null 2>&1 || die "dockerd did not answer within 60 s; see $DOCKERD_LOG"
  say "dockerd is up"
fi

# 3b. Runtimes: gVisor's runsc (ptrace platform, no gVisor network stack) and crun, merged into
#     /etc/docker/daemon.json; a running dockerd reloads runtimes on SIGHUP.
reload_dockerd() {
  local pid
  pid=$(pgrep -xo dockerd || true)
  if [ -n "$pid" ]; then kill -HUP "$pid"; sleep 1; fi
}
runtime_config() {  # runtime_config add|remove NAME [PATH [ARGS...]]: exit 0 if the file changed
  python3 - "$@" <<'PY'
import json, os, sys
what, name, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
path = "/etc/docker/daemon.json"
cfg = json.load(open(path)) if os.path.exists(path) and os.path.getsize(path) else {}
runtimes = cfg.setdefault("runtimes", {})
if what == "add":
    if name in runtimes:
        sys.exit(1)
    runtimes[name] = {"path": rest[0], **({"runtimeArgs": rest[1:]} if rest[1:] else {})}
elif runtimes.pop(name, None) is None:
    sys.exit(1)
os.makedirs("/etc/docker", exist_ok=True)
with open(path, "w") as f:
    json.dump(cfg, f, indent=2)
PY
}
if [ "$(id -u)" = 0 ]; then
  changed=
  if command -v runsc >/dev/null && runtime_config add runsc /usr/bin/runsc --platform=ptrace --network=none; then
    say "registered gVisor (runsc) in /etc/docker/daemon.json"; changed=1
  fi
  if [ -x /usr/bin/crun ] && runtime_config add crun /usr/bin/crun; then
    say "registered crun in /etc/docker/daemon.json"; changed=1
  fi
  [ -z "$changed" ] || reload_dockerd
fi

# 4. Images ------------------------------------------------------------------------------------
if [ "${1:-}" != "--no-images" ]; then
  .venv/bin/runner images build
fi

# 5. crun registered but unable to run a container here would fail every sandbox (runner takes it
#    where the engine lists it): run one sandbox under it, hardened as runner makes them, and take
#    it out again if it cannot. (Without an image yet: at the next set-up that has one.)
runtimes=$(docker info --format '{{json .Runtimes}}' 2>/dev/null || true)
if [ "$(id -u)" = 0 ] && [[ $runtimes == *'"crun"'* ]] && docker image inspect runner/rootfs:bookworm >/dev/null 2>&1; then
  if ! out=$(.venv/bin/runner exec --runtime crun --image runner/rootfs:bookworm -- true 2>&1); then
    say "crun cannot run a sandbox here, so it is not registered: $out"
    if runtime_config remove crun; then reload_dockerd; fi
  fi
fi
