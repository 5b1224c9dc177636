"""The local backend: the agent runs on this machine, in the workspace as it is. NOT a sandbox."""
from __future__ import annotations

import sys
from typing import Literal

from .base import BackendConfig, Placement, Setting, ToolFolder


class LocalBackend(BackendConfig):
    type: Literal["local"] = "local"

    def placement(self, setting: Setting) -> "LocalPlacement":
        return LocalPlacement(self, setting)


class LocalPlacement(Placement):
    isolated = False

    def roots(self) -> list[dict]:
        ws = self.setting.workspace
        return [{"path": str(m.host_path(ws)), "read_only": m.mode == "ro"} for m in self.setting.policy.mounts]

    def make_sandbox(self, hello: dict, protected: list[str], tools: list[ToolFolder]):
        from executors.local import LocalExecutor

        from ..controller.sandbox import Sandbox

        ws = self.workspace
        hello = {**hello, "workspace": ws, "protected": [self.in_sandbox(p) for p in protected], "roots": self.roots()}
        return Sandbox(LocalExecutor(self.setting.workspace, env={"PYTHONDONTWRITEBYTECODE": "1"}), hello,
                       python=sys.executable, cwd=ws)


CONFIG = LocalBackend  # this module's backend (runner/backends/__init__.py lists the package)
