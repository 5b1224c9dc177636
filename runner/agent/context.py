"""The agent's configuration from the controller's hello, plus the background-job table.

One Context lives for the agent's whole life; each call gets it with `emit` set to the
function that streams an output chunk for that call.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Dict, List, Optional, Tuple

DEFAULT_MAX_WRITE = 10 * 1024 * 1024


class ConfigError(ValueError):
    """A hello the agent cannot work with."""


def _real(path: str) -> str:
    return os.path.realpath(path)


class Context:
    def __init__(self, workspace: str, protected: Optional[List[str]] = None,
                 roots: Optional[List[Dict[str, Any]]] = None, max_write_bytes: Optional[int] = None,
                 network: Optional[Dict[str, Any]] = None, search_endpoint: Optional[str] = None,
                 env: Optional[Dict[str, str]] = None) -> None:
        if not isinstance(workspace, str) or not workspace:
            raise ConfigError("hello needs a workspace: an absolute directory path")
        if not os.path.isdir(workspace):
            raise ConfigError(f"workspace {workspace} is not a directory")
        self.workspace_given = os.path.abspath(workspace)
        self.workspace = _real(workspace)
        # Protected directories: both where they are written and where links lead count.
        self.protected: List[str] = []
        for p in protected or []:
            if not isinstance(p, str) or not p:
                continue
            absolute = p if os.path.isabs(p) else os.path.join(self.workspace_given, p)
            for cand in (os.path.normpath(absolute), _real(absolute)):
                if cand not in self.protected:
                    self.protected.append(cand)
        self.roots: List[Tuple[str, bool]] = []
        for r in roots or []:
            if isinstance(r, str):
                r = {"path": r}
            if not isinstance(r, dict) or not isinstance(r.get("path"), str) or not os.path.isabs(r["path"]):
                raise ConfigError(f"each root is {{'path': ABSOLUTE, 'read_only': bool}}, got {r!r}")
            self.roots.append((_real(r["path"]), bool(r.get("read_only", True))))
        self.max_write_bytes = int(max_write_bytes) if max_write_bytes else DEFAULT_MAX_WRITE
        net = network or {}
        if not isinstance(net, dict):
            raise ConfigError("network is {'mode': 'none'|'allowlist', 'allow': [...]}")
        self.network_mode = str(net.get("mode") or "none")
        if self.network_mode not in ("none", "allowlist"):
            raise ConfigError(f"network mode {self.network_mode!r} is not none or allowlist")
        self.network_allow: List[str] = [str(a).lower() for a in (net.get("allow") or [])]
        self.search_endpoint = search_endpoint or net.get("search_endpoint") or None
        self.env: Dict[str, str] = {str(k): str(v) for k, v in (env or {}).items()}
        self.emit: Callable[[str], None] = lambda data: None
        from .jobs import JobTable

        self.jobs = JobTable()

    @classmethod
    def from_hello(cls, msg: Dict[str, Any]) -> "Context":
        return cls(workspace=msg.get("workspace") or os.getcwd(), protected=msg.get("protected"),
                   roots=msg.get("roots"), max_write_bytes=msg.get("max_write_bytes"), network=msg.get("network"),
                   search_endpoint=msg.get("search_endpoint"), env=msg.get("env"))

    def child_env(self) -> Dict[str, str]:
        """The environment of every command: the agent's, the hello's, and git's safe.directory
        so that git works in a workspace owned by another uid."""
        env = dict(os.environ)
        env.update(self.env)
        try:
            n = int(env.get("GIT_CONFIG_COUNT", "0"))
        except ValueError:
            n = 0
        env["GIT_CONFIG_KEY_%d" % n] = "safe.directory"
        env["GIT_CONFIG_VALUE_%d" % n] = "*"
        env["GIT_CONFIG_COUNT"] = str(n + 1)
        env.setdefault("GIT_TERMINAL_PROMPT", "0")
        env.setdefault("GIT_PAGER", "cat")
        env.setdefault("PAGER", "cat")
        return env
