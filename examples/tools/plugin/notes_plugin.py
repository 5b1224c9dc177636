#!/usr/bin/env python3
"""A JSON-lines plugin (Go SDK style): a long-lived process that describes its tools and answers
calls. It keeps state between calls (a counter) so tests can see a restart."""
import json
import os
import sys
import time

calls = 0
for line in sys.stdin:
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    if msg.get("type") in ("describe", "init"):
        print(json.dumps({"tools": [
            {"name": "note", "description": "Echo a note, with how many calls this plugin process has served",
             "parameters": {"type": "object", "properties": {"text": {"type": "string", "description": "the note"},
                                                              "mode": {"type": "string", "enum": ["ok", "die", "hang"],
                                                                       "default": "ok"}},
                            "required": ["text"]}},
        ]}), flush=True)
    elif msg.get("type") == "call":
        calls += 1
        params = msg.get("params") or {}
        if params.get("mode") == "die":
            print("dying on purpose", file=sys.stderr, flush=True)
            os._exit(3)
        if params.get("mode") == "hang":
            time.sleep(3600)
        print(json.dumps({"type": "result", "call_id": msg.get("call_id"), "is_error": False,
                          "content": [{"type": "text", "text": f"note #{calls} (pid {os.getpid()}): {params.get('text')}"}]}),
              flush=True)
