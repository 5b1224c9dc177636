"""An E2B sandbox on runner: one hardened container of the tenant's (runner's sandbox config from
the tenant's default policy: its limits, runtime, no network unless the policy grants egress)
that lives as long as the sandbox, whatever the serve session does; a workspace directory under
the data directory mounted at /home/user; and in it the in-sandbox process of inbox.py, run as
the sandbox's user (uid 1000, HOME=/home/user), which starts the commands and does the file
operations. A Runner on the same workspace and policy is kept for what runner decides on the
controller (its guard pipeline, redaction and audit); it never starts a sandbox of its own.
"""
from __future__ import annotations

import base64
import concurrent.futures
import json
import secrets
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from ...errors import RunnerError

HOME = "/home/user"
USER = "1000:1000"
MAX_LINE = 128 * 1024 * 1024  # bytes of one line from the in-sandbox process (a file read's base64)
ENVD_VERSION = "0.6.4"  # what the SDK checks features against: file metadata (0.6.2), watch entries (0.6.3)


class InboxError(RunnerError):
    """The in-sandbox process answered an error: kind is not_found, exists, permission, invalid,
    too_large, or gone (it ended)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class Inbox:
    """The in-sandbox process of one sandbox, over a docker exec's stdin and stdout."""

    def __init__(self, executor, env: dict[str, str]) -> None:
        from ...backends.docker import DockerBackend
        from .inbox import SOURCE

        self.sock, self._frames = DockerBackend.exec_attached(executor, ["python3", "-u", "-c", SOURCE], env, HOME, USER)
        self._wlock = threading.Lock()
        self._ids = 0
        self._waiting: dict[int, concurrent.futures.Future] = {}
        self._on_pid: dict[int, Callable[[dict], None]] = {}  # request id -> the watcher of the process it starts
        self._lock = threading.Lock()
        self.watchers: dict[int, list[Callable[[dict], None]]] = {}
        self.ended: dict[int, dict] = {}  # pid -> its end event (kept for a connect that comes late)
        self.dead = False
        self.ready = concurrent.futures.Future()
        threading.Thread(target=self._read, name="e2b-inbox", daemon=True).start()

    def _read(self) -> None:
        mux = self._frames
        buf = bytearray()
        try:
            while (item := mux.frame()) is not None:
                stream, data = item
                if stream != "stdout":
                    sys.stderr.write(f"runner serve: e2b sandbox process: {data[:500].decode('utf-8', 'replace')}")
                    continue
                buf += data
                while (n := buf.find(b"\n")) >= 0:
                    line = bytes(buf[:n])
                    del buf[: n + 1]
                    self._one(line)
                if len(buf) > MAX_LINE:
                    break
        finally:
            self.dead = True
            with self._lock:
                waiting, self._waiting = self._waiting, {}
                watchers = dict(self.watchers)
            for f in waiting.values():
                if not f.done():
                    f.set_exception(InboxError("gone", "the sandbox is gone"))
            if not self.ready.done():
                self.ready.set_exception(InboxError("gone", "the sandbox's process did not start"))
            for pid, ws in watchers.items():
                for w in ws:
                    w({"ev": "end", "pid": pid, "code": -1, "signal": 9, "gone": True})

    def _one(self, line: bytes) -> None:
        try:
            msg = json.loads(line)
        except ValueError:
            return
        if not isinstance(msg, dict):
            return
        if "id" in msg:
            with self._lock:
                f = self._waiting.pop(msg["id"], None)
                fn = self._on_pid.pop(msg["id"], None)
                if fn is not None and msg.get("ok") and isinstance(msg.get("pid"), int):
                    self.watchers.setdefault(msg["pid"], []).append(fn)  # before any of its output is read
            if f is not None and not f.done():
                if msg.get("ok"):
                    f.set_result(msg)
                else:
                    f.set_exception(InboxError(str(msg.get("error")), str(msg.get("message"))[:2000]))
            return
        ev = msg.get("ev")
        if ev == "ready":
            if not self.ready.done():
                self.ready.set_result(msg)
            return
        pid = msg.get("pid")
        with self._lock:
            ws = list(self.watchers.get(pid, ()))
            if ev == "end":
                self.ended[pid] = msg
                self.watchers.pop(pid, None)
        for w in ws:
            w(msg)

    def ask(self, op: str, watcher: Callable[[dict], None] | None = None, **kw: Any) -> concurrent.futures.Future:
        with self._lock:
            self._ids += 1
            i = self._ids
            f: concurrent.futures.Future = concurrent.futures.Future()
            if self.dead:
                f.set_exception(InboxError("gone", "the sandbox is gone"))
                return f
            self._waiting[i] = f
            if watcher is not None:
                self._on_pid[i] = watcher
        line = (json.dumps({"id": i, "op": op, **kw}) + "\n").encode()
        try:
            with self._wlock:
                self.sock.sendall(line)
        except OSError:
            with self._lock:
                self._waiting.pop(i, None)
            f.set_exception(InboxError("gone", "the sandbox is gone"))
        return f

    def watch(self, pid: int, fn: Callable[[dict], None]) -> Callable[[], None]:
        with self._lock:
            end = self.ended.get(pid)
            if end is None:
                self.watchers.setdefault(pid, []).append(fn)
        if end is not None:
            fn(end)

        def stop() -> None:
            with self._lock:
                ws = self.watchers.get(pid)
                if ws and fn in ws:
                    ws.remove(fn)
        return stop

    def close(self) -> None:
        import socket

        try:  # (a shutdown first: a close alone does not wake the reader blocked in recv)
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self.sock.close()
        except OSError:
            pass


@dataclass
class Sandbox:
    id: str
    tenant: str
    template: str
    policy: str
    metadata: dict[str, str]
    envs: dict[str, str]
    secure: bool
    access_token: str
    started_at: float
    end_at: float
    workspace: Path
    executor: Any = None
    inbox: Inbox | None = None
    runner: Any = None  # runner.Runner: guards, redaction, audit
    release: Callable[[], None] | None = None
    client_id: str = "runner"
    limits: Any = None
    killed: bool = False
    grant: Any = None
    paused: bool = False  # frozen by the engine's pause (cgroup freezer): envd answers 502 unless auto_resume
    on_timeout: str = "kill"  # or "pause" (E2B's lifecycle.on_timeout / autoPause)
    pause_memory: bool = True  # that pause keeps its processes (else filesystem-only: autoPauseMemory false)
    auto_resume: bool = False  # an envd request to it when paused resumes it
    cold: bool = False  # paused filesystem-only: its container removed (memory freed), /tmp in tmp.tar beside home
    config: Any = None  # its container's config (a filesystem-only pause boots a new one of it)
    env: dict = field(default_factory=dict)
    timeout: int = 15  # seconds it runs past a resume (its create's timeout, or the last given)
    watchers: dict = field(default_factory=dict)  # filesystem watcher id -> (its inbox watch, entries wanted)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def cid(self) -> str:
        return self.executor.container.id

    def audit(self, op: str, args: dict, ok: bool = True, text: str = "") -> None:
        """The E2B operation in the tenant's audit log (the Runner's: its redaction applies)."""
        r = self.runner
        if r is None or r.audit is None:
            return
        from ...results import ToolResult

        res = ToolResult.error(text) if not ok else ToolResult(content=text or "ok")
        try:
            r.audit.record_result(call_id="e2b-" + secrets.token_hex(4), tool=f"e2b.{op}", args=r.redactor.redact_obj(args),
                                  result=res, session=self.id, tenant=self.tenant)
        except Exception as e:
            sys.stderr.write(f"runner serve: could not audit e2b.{op}: {e}\n")

    def close(self) -> None:
        self.killed = True
        if self.inbox is not None:
            self.inbox.close()
        for step in (lambda: self.executor and self.executor.stop(), lambda: self.runner and self.runner.close(wait=True)):
            try:
                step()
            except Exception as e:
                sys.stderr.write(f"runner serve: closing e2b sandbox {self.id}: {e}\n")
        if self.release is not None:
            self.release()
            self.release = None


class _Engine:
    """What runner/controller/snapshots.py's freeze, thaw and _exec take of a sandbox: its
    container and executor (one way to pause, resume and tar /tmp, shared with /v1's sessions)."""

    def __init__(self, sbx: Sandbox) -> None:
        self.executor = sbx.executor
        self.proc = sbx.executor


def pause(sbx: Sandbox, memory: bool = True) -> bool:
    """The engine's pause of the sandbox's container (memory: its processes kept, frozen), or,
    filesystem-only (memory False), its /tmp packed beside its home and its container removed,
    its memory freed and its processes ended; False when it was paused already."""
    from ...controller import snapshots

    with sbx.lock:
        if sbx.paused:
            return False
        if memory:
            snapshots.freeze(_Engine(sbx))
        else:
            snapshots._exec(_Engine(sbx), snapshots.TMP_TAR_CMD, out=sbx.workspace.parent / snapshots.TMP_TAR,
                            limit=1 << 30)
            if sbx.inbox is not None:
                sbx.inbox.close()
            sbx.executor.stop()
            sbx.cold = True
        sbx.paused = True
        return True


def resume(sbx: Sandbox) -> bool:
    """Thaw a paused sandbox, or boot a new container on its home and /tmp after a filesystem-only
    pause (its access token and id stay); False when it was running."""
    from ...controller import snapshots

    with sbx.lock:
        if not sbx.paused:
            return False
        if sbx.cold:
            _boot(sbx, sbx.workspace.parent)
            (sbx.workspace.parent / snapshots.TMP_TAR).unlink(missing_ok=True)
            sbx.cold = False
        else:
            snapshots.thaw(_Engine(sbx))
        sbx.paused = False
        return True


def snapshot(sbx: Sandbox, store, name: str | None = None) -> dict:
    """A snapshot of the sandbox now into the tenant's store (snapshots.Store: its quota): its
    home packed from the controller's side with the container frozen, its /tmp by tar in it; the
    metadata (with `id`). Processes and memory are not captured (the metadata says so)."""
    import json
    import os

    from ...controller import snapshots as S
    from ...untrusted import wspath

    store.check_quota()
    sid, d = store.new_dir()
    eng = _Engine(sbx)
    try:
        with sbx.lock:
            if sbx.cold:  # (no container: its home is on disk, its /tmp packed already)
                import shutil

                size = S.pack(sbx.workspace, d / S.WORKSPACE_TAR)
                shutil.copyfile(sbx.workspace.parent / S.TMP_TAR, d / S.TMP_TAR)
            else:
                size = _pack_live(sbx, eng, d)
        meta = {"id": sid, "name": name, "created": time.time(), "session": sbx.id, "tenant": sbx.tenant,
                "image": sbx.template, "cwd": HOME, "env": sorted(sbx.envs), "processes": False,
                "not_captured": [S.NOT_CAPTURED_PROCESSES], "workspace_bytes": size, "e2b": True,
                "size": sum(f.stat().st_size for f in d.iterdir())}
        (d / (S.META + ".part")).write_text(json.dumps(meta, indent=1))
        os.replace(d / (S.META + ".part"), d / S.META)
        return meta
    except BaseException:
        wspath.remove_tree(d)
        raise


def _pack_live(sbx: Sandbox, eng: _Engine, d: Path) -> int:
    from ...controller import snapshots as S

    if sbx.paused:
        S.thaw(eng)
    try:
        S._exec(eng, S.TMP_TAR_CMD, out=d / S.TMP_TAR, limit=1 << 30)
        S.freeze(eng)
        try:
            return S.pack(sbx.workspace, d / S.WORKSPACE_TAR)
        finally:
            S.thaw(eng)
    finally:
        if sbx.paused:
            S.freeze(eng)


def new_id() -> str:
    return "i" + secrets.token_hex(10)


def start(sbx: Sandbox, grant, image: str, data: Path, snapshot: Path | None = None) -> None:
    """Make sbx's container (hardened: runner's sandbox config from the tenant's policy) and its
    in-sandbox process, its home and /tmp filled from a snapshot's directory when given; raises
    on failure (the caller closes sbx)."""
    from ...backends.docker import DockerBackend
    from ...controller.core import Runner
    from ...policy import load
    from ..serve.sessions import own_workspace

    policy = load(grant.policies[sbx.policy])
    limits = policy.limits
    sbx.workspace.mkdir(parents=True, mode=0o755)
    own_workspace(sbx.workspace)
    if snapshot is not None:
        from ...controller import snapshots

        snapshots.restore_workspace(snapshot, sbx.workspace)
    passwd = sbx.workspace.parent / (sbx.id + ".passwd")
    passwd.write_text("root:x:0:0:root:/root:/bin/bash\nuser:x:1000:1000:user:/home/user:/bin/bash\n"
                      "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n")
    group = sbx.workspace.parent / (sbx.id + ".group")
    group.write_text("root:x:0:\nuser:x:1000:\nnogroup:x:65534:\n")
    env = {"HOME": HOME, "USER": "user", "LANG": "C.UTF-8", **sbx.envs}
    cfg = DockerBackend.container_config([(str(sbx.workspace), HOME), (str(passwd), "/etc/passwd", True),
                                          (str(group), "/etc/group", True)],
                                         image=image, workdir=HOME, user=USER, env=env, session=sbx.id,
                                         lifecycle="per-session", limits=limits.sandbox_limits(),
                                         runtime=policy.sandbox.runtime,
                                         labels={"runner.tenant": sbx.tenant, "runner.role": "e2b", "runner.e2b": sbx.id})
    sbx.limits = cfg.limits
    sbx.runner = Runner(workspace=sbx.workspace, policy=grant.policies[sbx.policy], session=sbx.id, tenant=sbx.tenant)
    sbx.config, sbx.env = cfg, env
    _boot(sbx, snapshot)


def _boot(sbx: Sandbox, tmp_from: Path | None = None) -> None:
    """A container of sbx's config on its home, and its in-sandbox process; its /tmp from
    tmp_from's tmp.tar (a snapshot's directory, or the sandbox's own after a filesystem-only pause)."""
    from ...backends.docker import DockerBackend

    sbx.executor = DockerBackend.make_executor(sbx.config)
    sbx.executor.start()
    sbx.inbox = Inbox(sbx.executor, sbx.env)
    sbx.inbox.ready.result(timeout=60)
    if tmp_from is not None:
        from ...controller import snapshots

        snapshots.restore_tmp(_Engine(sbx), tmp_from)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def now() -> float:
    return time.time()
