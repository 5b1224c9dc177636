#!/usr/bin/env bash
# `make demo`: runner doing its job on this machine, after set-up.
set -uo pipefail
cd "$(dirname "$0")/.."
R=.venv/bin/runner
step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; "$@"; echo "(exit status $?)"; }

step $R doctor
step $R exec -- sh -c 'echo "hello from $(hostname), uid $(id -u)"; grep -E "CapEff|NoNewPrivs|Seccomp" /proc/self/status'
step $R exec -- sh -c 'touch /etc/owned'
step $R exec --timeout 2 -- sh -c 'sleep 100 & sleep 100'
step $R exec --memory 64m -- python3 -c 'x = bytearray(512 * 2**20)'
step $R exec -- sh -c 'echo "interfaces: $(tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d " ")"; echo "routes: $(tail -n +2 /proc/net/route | wc -l)"'
echo 'some input' | { printf '\n\033[1m$ echo "some input" | runner exec -- tr a-z A-Z\033[0m\n'; $R exec -- tr a-z A-Z; }
if [ -x "$R" ] && $R tools >/dev/null 2>&1; then
  # the sandbox runs as the workspace's owner: an unprivileged one (the image's user, 1000), as a
  # person's own directory would be; a workspace root owns gets a root sandbox, and a warning
  ws=$(mktemp -d); echo 'print("hello")' > "$ws/hello.py"; chown -R 1000:1000 "$ws"
  step $R call read '{"path": "hello.py"}' --workspace "$ws"
  step $R call bash '{"command": "python3 hello.py; ls -la"}' --workspace "$ws"
  step $R call edit '{"path": "hello.py", "old_string": "hello", "new_string": "sandbox"}' --workspace "$ws"
  # custom tools brought from other agents, described and run in the sandbox
  mkdir -p "$ws/tools" "$ws/.acai/tools"
  cp examples/tools/executable/wordcount examples/tools/executable/wordcount.md examples/tools/lua/line_count.lua "$ws/tools/"
  cp -r examples/tools/lua/lib "$ws/tools/"
  cp examples/tools/describe-execute/greet.py "$ws/.acai/tools/"
  chown -R 1000:1000 "$ws"
  step $R tools --workspace "$ws"
  step $R call wordcount '{"args": "hello.py"}' --workspace "$ws"
  step $R call line_count '{"path": "hello.py", "word": "sandbox"}' --workspace "$ws"
  step $R call greet '{"who": 42}' --workspace "$ws"
  rm -rf "$ws"
fi
step $R gc
