"""What the controller's hello says: the workspace, protected places, limits, network rules."""
from __future__ import annotations

import os


class ToolError(Exception):
    """A tool failure with a message the agent can act on (becomes is_error: true). error_type:
    `validation` (a path outside the workspace) or `gated` (a protected one), as the controller's
    own refusals say (runner.errors.ErrorType); None: the tool ran and failed (`execution`)."""

    def __init__(self, message: str, error_type: "str | None" = None) -> None:
        super().__init__(message)
        self.error_type = error_type


def dir_id(path: str) -> "tuple[int, int] | None":
    """(device, inode) of the directory a path leads to now, links followed; None if none."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


class Ctx:
    def __init__(self, hello: dict) -> None:
        self.workspace = os.path.realpath(hello.get("workspace") or os.getcwd())
        self.workspace_id = dir_id(self.workspace)  # the directory it named then (procs._cwd)
        self.protected = [os.path.realpath(p) for p in hello.get("protected") or []]
        self.protected_lexical = [os.path.normpath(p) for p in hello.get("protected") or []]
        self.roots = [(os.path.realpath(r["path"]), bool(r.get("read_only"))) for r in hello.get("roots") or []]
        self.max_write = int(hello.get("max_write_bytes") or 10 * 1024 * 1024)
        net = hello.get("network") or {}
        self.net_mode = net.get("mode", "none")
        self.net_allow = list(net.get("allow") or [])
        self.search_endpoint = hello.get("search_endpoint")
        self.proxy = hello.get("proxy")  # allowlist mode in docker: the egress proxy checks addresses
        env = dict(os.environ)
        env.update(hello.get("env") or {})
        # git refuses a repository owned by another uid unless told it is safe.
        env.update({"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "safe.directory", "GIT_CONFIG_VALUE_0": "*",
                    "GIT_TERMINAL_PROMPT": "0"})
        self.env = env
        self.send = None  # set by the server: send(dict) writes one protocol line
        self.hold = None  # set by the server: hold(dict) writes it with the next send
