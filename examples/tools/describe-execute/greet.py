#!/usr/bin/env python3
"""An acai-style dynamic tool: TOOL_ACTION=describe prints JSON, TOOL_ACTION=execute reads
[{"name": ..., "value": ...}] on stdin and prints the result."""
import json
import os
import sys

if os.environ.get("TOOL_ACTION") == "describe":
    print(json.dumps({
        "name": "greet",
        "description": "Greet someone, a number of times",
        "parameters": [
            {"name": "who", "type": "string", "description": "who to greet", "required": True},
            {"name": "times", "type": "number", "description": "how many times", "required": False, "default": 1},
            {"name": "shout", "type": "boolean", "description": "in capitals", "required": False},
        ],
        "needsApproval": False,
    }, indent=2))
    sys.exit(0)

if os.environ.get("TOOL_ACTION") == "execute":
    params = {p["name"]: p["value"] for p in json.load(sys.stdin)}
    text = " ".join([f"hello {params['who']}"] * int(params.get("times", 1)))
    print(json.dumps({"greeting": text.upper() if params.get("shout") else text}, indent=2))
