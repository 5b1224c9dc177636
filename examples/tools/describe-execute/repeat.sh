#!/usr/bin/env bash
# An acai-style dynamic tool in bash that describes itself in the plain-text form.
if [ "$TOOL_ACTION" = describe ]; then
  cat <<'TXT'
name: repeat
description: Print a character many times (to test large outputs)
needsApproval: false
parameters:
- char (string, optional, default x): the character
- count (integer, required): how many times
TXT
  exit 0
fi
params=$(cat)
count=$(python3 -c 'import json,sys; print({p["name"]: p["value"] for p in json.loads(sys.argv[1])}["count"])' "$params")
char=$(python3 -c 'import json,sys; print({p["name"]: p["value"] for p in json.loads(sys.argv[1])}.get("char", "x"))' "$params")
head -c "$count" /dev/zero | tr '\0' "$char"
