"""A Session: one Runner's sandboxes on one backend, between the Runner and the executors.

    session = Session(setting, backends.for_policy("docker"), env={...})
    session.start()                                  # the backend's shared parts, the warm pool
    msg = session.run("c1", "read", {"path": "a"}, timeout=30, on_output=print)   # one agent op
    session.close()

It acquires a sandbox (the session's own, or a fresh one per call), runs one agent op in it
and replaces a sandbox that died; it ships this machine's tool folders where the backend wants
them; it knows the protected paths of the workspace. It knows nothing of tools, policies'
gates or results: the Runner (core.py) decides, the Session places, the Sandbox talks to the
agent. Custom tools (custom.py) use it too, never the Runner.
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable, Optional

from ..backends import BackendConfig, Setting, ToolFolder
from .sandbox import NoSandbox, Sandbox, SandboxDied


class Session:
    def __init__(self, setting: Setting, backend: BackendConfig, env: dict[str, str]) -> None:
        from ..tools import custom
        from ..policy.protect import policy_protected_dirs

        self.setting = setting
        self.backend = backend
        self.placement = backend.placement(setting)
        self.env = env  # the sandbox environment the policy grants (values are secrets' too)
        self.protected = policy_protected_dirs(self.policy, workspace=self.workspace)
        self.protected += [d for d in custom.protected_dirs(self) if d not in self.protected]
        self.placement.check(self.protected)
        self._tools: Optional[list[ToolFolder]] = None
        self._pool = None
        self._sandbox: Optional[Sandbox] = None
        self._busy: Optional[Sandbox] = None  # the sandbox of the op running now (abort())
        self._busy_id: Optional[str] = None  # the call id of the op running now, from before its sandbox is had
        self._cancelled: set[str] = set()  # call ids cancelled (cancel()) and not yet forgotten
        self._lock = threading.RLock()
        self.paused: Optional[Sandbox] = None  # the sandbox pause() froze (runner/controller/snapshots.py)
        self.restore_tmp = None  # a snapshot's directory whose /tmp the next fresh sandbox gets
        self.after_restore: Optional[Callable[[], None]] = None  # called once that /tmp is in a sandbox

    # -- the facts ------------------------------------------------------------------------
    @property
    def policy(self):
        return self.setting.policy

    @property
    def workspace(self) -> Path:
        return self.setting.workspace

    @property
    def session_id(self) -> str:
        return self.setting.session_id

    @property
    def lifecycle(self) -> str:
        return self.policy.sandbox.lifecycle

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> "Session":
        from .pool import SandboxPool

        with self._lock:
            if self._pool is None:
                self.placement.open()
                size = self.policy.sandbox.pool_size
                if size is None:
                    size = 2 if self.lifecycle == "per-call" else 0
                self._pool = SandboxPool(self.make_sandbox, size)
                if self.lifecycle == "per-session":
                    self._sandbox = self._fresh(self._pool.get())
        return self

    def _fresh(self, sandbox: Sandbox) -> Sandbox:
        """A sandbox just taken from the pool, given a snapshot's /tmp when one waits for it."""
        if self.restore_tmp is not None:
            from . import snapshots

            snap, self.restore_tmp = self.restore_tmp, None
            try:
                snapshots.restore_tmp(sandbox, snap)
            except BaseException:
                sandbox.close()
                raise
            done, self.after_restore = self.after_restore, None
            if done is not None:
                done()
        return sandbox

    # -- pause and resume (the engine's pause: runner/controller/snapshots.py) -------------
    def live_sandbox(self) -> Optional[Sandbox]:
        """The session's own sandbox when one runs now (per-session lifecycle), else None."""
        with self._lock:
            sb = self._sandbox
            return sb if sb is not None and sb.alive else None

    def pause(self) -> bool:
        """Freeze the session's sandbox: its processes get no CPU until resume() or the next op.
        False when no sandbox runs to freeze (per-call lifecycle, or none started yet)."""
        from . import snapshots

        with self._lock:
            if self.paused is not None:
                return True
            sb = self.live_sandbox()
            if sb is None:
                return False
            snapshots.freeze(sb)
            self.paused = sb
            return True

    def resume(self) -> bool:
        """Thaw what pause() froze; False when nothing was paused."""
        from . import snapshots

        with self._lock:
            sb, self.paused = self.paused, None
            if sb is None:
                return False
            snapshots.thaw(sb)
            return True

    def close_steps(self, wait: bool = True) -> list[Callable[[], None]]:
        """The steps of closing, in order (the Runner runs each even when an interrupt hits one).
        wait=False: the sandboxes are closed at once and their containers removed after the
        answer, by runner/controller/finisher.py's thread (before this process exits)."""
        return [lambda: self._close_sandbox(wait), lambda: self._close_pool(wait), self.placement.close]

    def close(self, wait: bool = True) -> None:
        for step in self.close_steps(wait):
            step()

    def _close_sandbox(self, wait: bool = True) -> None:
        if self.paused is not None:  # thawed first: a frozen agent would not hear its shutdown
            try:
                self.resume()
            except Exception:
                self.paused = None  # (the engine removes a paused container all the same)
        if self._sandbox is not None:
            self._sandbox.close(background=not wait)
            self._sandbox = None

    def _close_pool(self, wait: bool = True) -> None:
        if self._pool is not None:
            self._pool.close(background=not wait)

    # -- sandboxes ------------------------------------------------------------------------
    def tool_folders(self) -> list[ToolFolder]:
        """This machine's tool folders the sandbox needs (mounted or copied), found once per
        Runner and again after refresh_tools (forget_tool_folders)."""
        from ..tools import custom

        with self._lock:
            if self._tools is None:
                self._tools = custom.shipments(self) if self.policy.tools.custom else []
            return self._tools

    def forget_tool_folders(self) -> None:
        with self._lock:
            self._tools = None

    def ship_tools(self) -> Optional[str]:
        """Bring this machine's tool folders to the sandbox's side (backends that copy them);
        why that failed, or None."""
        return self.placement.ship(self.tool_folders())

    def make_sandbox(self) -> Sandbox:
        pol = self.policy
        hello = {"max_write_bytes": pol.limits.max_write, "network": pol.network.model_dump(mode="json"),
                 "roots": [], "search_endpoint": pol.network.search_endpoint, "env": dict(self.env),
                 "single_call": self.lifecycle == "per-call"}
        return self.placement.make_sandbox(hello, self.protected, self.tool_folders())

    def acquire(self) -> Sandbox:
        """A started sandbox for one op: the session's own (replaced when it died), or a fresh
        one per call. Raises NoSandbox."""
        died = None
        try:
            with self._lock:
                if self._pool is None:
                    self.start()
                if self.lifecycle == "per-call":
                    return self._pool.get()
                old = self._sandbox
                if old is not None and not old.alive:
                    # It ended since the last call (killed, its engine gone): whatever the agent
                    # had there is lost, and the agent is told so once, unless it was already
                    # told when the sandbox was retired (an OOM kill).
                    old.close()
                    self._sandbox = None
                    if old.retired is None:
                        died = old.dead or "it ended after the previous call"
                if died is None:
                    if self._sandbox is None:
                        self._sandbox = self._fresh(self._pool.get())
                    return self._sandbox
        except Exception as e:
            raise NoSandbox(f"could not start a sandbox: {e}") from e
        raise SandboxDied(died)

    def run(self, call_id: str, op: str, args: dict, timeout: float,
            on_output: Callable[[str], None] | None = None) -> dict:
        """One agent op (a tool, or custom_describe/custom_run) in a sandbox: its raw result
        message. Raises NoSandbox, or SandboxDied (the sandbox is closed; the next op gets a
        fresh one). A paused session is resumed first."""
        if self.paused is not None:
            self.resume()
        with self._lock:
            if call_id in self._cancelled:
                raise SandboxDied("the call was cancelled before it ran")
            self._busy_id = call_id
        try:
            sandbox = self.acquire()
        except BaseException:
            with self._lock:
                self._busy_id = None
            raise
        with self._lock:
            self._busy = sandbox
            cancelled = call_id in self._cancelled  # while its sandbox was being had
        try:
            if cancelled:
                self._stop(sandbox, "its call was cancelled")
                raise SandboxDied("the call was cancelled")
            return sandbox.call(call_id, op, args, timeout, on_output=on_output)
        except SandboxDied:
            sandbox.close()
            with self._lock:
                if sandbox is self._sandbox:
                    self._sandbox = None
            raise
        except BaseException:  # an interrupt (Ctrl-C) in the middle of the op: the op is stopped, its
            self._stop(sandbox, "an interrupt stopped its call")  # processes gone, before it goes on
            raise
        finally:
            with self._lock:
                self._busy = self._busy_id = None
            if self.lifecycle == "per-call":
                sandbox.close()

    def on_executor(self, fn: Callable):
        """fn(executor) with the executor of a sandbox of the session (the Runner's file
        operations): the session's own, or a fresh one for a per-call session. Raises NoSandbox,
        and what fn raises."""
        sandbox = self.acquire()
        try:
            return fn(sandbox.executor)
        finally:
            if self.lifecycle == "per-call":
                sandbox.close()

    def abort(self, why: str) -> bool:
        """End the op running now, if one is (False if none): its sandbox is killed and removed under
        it (the op ends as SandboxDied; when this returns, its processes are gone) and the next op
        gets a fresh one, told nothing of it. The caller makes sure the op running is the one it
        means (turns.Stoppable: the call of a client that left or cancelled it, in runner serve and
        runner mcp; Runner.cancel)."""
        with self._lock:
            sandbox = self._busy
            if sandbox is None:
                return False
        self._stop(sandbox, why)
        return True

    def cancel(self, call_id: str) -> None:
        """Cancel the op of this call id: the one running now is stopped as abort() stops it (when
        this returns, its processes are gone); one that has not begun never runs (SandboxDied).
        Remembered until forget(call_id)."""
        with self._lock:
            self._cancelled.add(call_id)
            sandbox = self._busy if self._busy_id == call_id else None
        if sandbox is not None:
            self._stop(sandbox, "its call was cancelled")

    def cancelled(self, call_id: str) -> bool:
        with self._lock:
            return call_id in self._cancelled

    def forget(self, call_id: str) -> None:
        with self._lock:
            self._cancelled.discard(call_id)

    def _stop(self, sandbox: Sandbox, why: str) -> None:
        """The sandbox serves no further op: it is killed now, with everything it runs."""
        with self._lock:
            if sandbox.retired is None:
                sandbox.retired = why
            if sandbox is self._sandbox:
                self._sandbox = None
        sandbox.close(kill=True)
