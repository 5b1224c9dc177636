"""The in-sandbox agent: every built-in tool body, answering JSON lines on stdin/stdout.

Standard library only, Python 3.9+, and only relative imports inside this package: it is
shipped into sandboxes under another top-level name (`runner_agent`). Start it with
`python3 -m runner.agent` (from the repository) or `python3 -u -m runner_agent`.
"""
