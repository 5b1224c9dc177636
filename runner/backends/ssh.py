"""The ssh backend: the agent runs on an SSH host, in a workspace directory there.

The project's tool folders are the host's; this machine's tool folders are copied to
/tmp/runner-tools-SESSION on the host (one tar stream over one command), removed on close.
"""
from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import Any, Literal, Optional

from executors.ssh import SSHConfig

from ..errors import RunnerError
from .base import BackendConfig, Placement, Setting, ToolFolder

SHIP_MAX = 64 * 1024 * 1024  # bytes of this machine's tool folders copied to the host at most
_SHIP = 'set -e; rm -rf -- "$1"; umask 077; mkdir -- "$1"; tar -xf - -C "$1" --no-same-owner'


class SSHBackend(BackendConfig):
    type: Literal["ssh"] = "ssh"
    ssh: SSHConfig

    @classmethod
    def from_given(cls, given: Any = None, **settings: Any) -> "SSHBackend":
        if given is None and settings.get("ssh") is None:
            raise RunnerError("executor ssh needs an SSH target: Runner(..., ssh=SSHConfig(host=..., user=..., "
                              "key_file=..., known_hosts=..., workdir=REMOTE_WORKSPACE))")
        cfg = super().from_given(given, **settings)
        if not cfg.ssh.workdir:
            raise RunnerError("executor ssh needs ssh.workdir: the workspace directory on the remote host")
        return cfg

    def placement(self, setting: Setting) -> "SSHPlacement":
        return SSHPlacement(self, setting)


class SSHPlacement(Placement):
    remote = True
    isolated = False  # the tools run on the host as its user: no container holds the policy there
    config: SSHBackend

    def __init__(self, config: SSHBackend, setting: Setting) -> None:
        super().__init__(config, setting)
        self.shipped: Optional[str] = None  # the host folder holding this machine's tool folders

    @property
    def workspace(self) -> str:
        return self.config.ssh.workdir

    def warnings(self) -> list[str]:
        """The SSH host is no sandbox: say so as the local executor does (policy.warnings)."""
        ssh, pol = self.config.ssh, self.setting.policy
        out = [f"executor ssh: tools run on {ssh.user}@{ssh.host} with that user's permissions, through its python3. "
               "This is NOT a sandbox: no container, no network isolation (bash reaches whatever the host reaches, "
               "whatever the policy's network mode), no resource limits, and protected directories are checked "
               "by the writing tools only (bash can write them)"]
        if pol.sandbox.workspace == "ro":
            out.append("sandbox.workspace ro cannot be enforced by the ssh executor: only the writing tools are "
                       "refused, bash can still write")
        return out

    @property
    def tools_root(self) -> str:
        # the session id may come from a caller: only safe characters reach the path
        return "/tmp/runner-tools-" + re.sub(r"[^A-Za-z0-9_-]", "_", str(self.setting.session_id))[:64]

    def sandbox_view(self, host: Path) -> Optional[str]:
        return None  # nothing of this machine is on the host until it is copied

    def make_sandbox(self, hello: dict, protected: list[str], tools: list[ToolFolder]):
        from executors.ssh import SSHExecutor

        from ..controller.sandbox import Sandbox

        ws = self.workspace
        hello = {**hello, "workspace": ws, "protected": [self.in_sandbox(p) for p in protected]}
        return Sandbox(SSHExecutor(self.config.ssh), hello, cwd=ws, env={"PYTHONDONTWRITEBYTECODE": "1"})

    def ship(self, tools: list[ToolFolder]) -> Optional[str]:
        """Copy this machine's tool folders into the session's folder on the host, afresh on every
        scan, as one tar stream over one command. Answers why it failed, or None."""
        import tarfile
        import tempfile

        from executors.models import ExecRequest
        from executors.ssh import SSHExecutor

        if not tools:
            return None
        host = self.config.ssh.host
        size = sum(_tree_size(t.host) for t in tools)  # before anything is read into memory
        if size > SHIP_MAX:
            return (f"the custom tool folders of this machine come to {size} bytes, over {SHIP_MAX} to copy to "
                    f"{host}: list fewer folders, or install the tools on the host")
        root = self.tools_root
        with tempfile.SpooledTemporaryFile(max_size=8 * 1024 * 1024) as buf:
            with tarfile.open(fileobj=buf, mode="w") as tar:
                for t in tools:
                    tar.add(str(t.host), arcname=posixpath.relpath(t.sandbox, root))
            buf.seek(0)
            self.shipped = root  # from now on close() removes it, also after a half-done copy
            ex = SSHExecutor(self.config.ssh)
            try:
                res = ex.exec(ExecRequest(argv=["sh", "-c", _SHIP, "sh", root], timeout=300), stdin=buf)
            except Exception as e:
                return f"could not copy the custom tool folders to {host}: {e}"
            finally:
                ex.stop()
        if res.exit_code != 0:
            return (f"could not copy the custom tool folders to {host}:{root} (exit code {res.exit_code}): "
                    f"{res.stderr.decode('utf-8', 'replace').strip()[:300]}")
        return None

    def close(self) -> None:
        """Remove the session's copy of the tool folders from the host (best effort)."""
        if not self.shipped:
            return
        from executors.models import ExecRequest
        from executors.ssh import SSHExecutor

        ex = SSHExecutor(self.config.ssh)
        try:
            ex.exec(ExecRequest(argv=["rm", "-rf", "--", self.shipped], timeout=60))
            self.shipped = None
        except Exception:
            pass
        finally:
            ex.stop()


def _tree_size(path: Path) -> int:
    """Bytes of the files under path (links not followed, any depth: wspath.walk), as tar would
    store them."""
    import stat

    from ..untrusted.wspath import walk

    try:
        st = path.lstat()
    except OSError:
        return 0
    if not stat.S_ISDIR(st.st_mode):
        return st.st_size
    try:
        return sum(e.st_size for _, _, e in walk(path) if stat.S_ISREG(e.st_mode))
    except OSError:  # the folder changed under the walk: too big to say, so not copied
        return 1 << 62


CONFIG = SSHBackend  # this module's backend (runner/backends/__init__.py lists the package)
