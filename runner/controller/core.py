"""The Runner: validates each tool call, runs it in a sandbox, and reports what came back.

    with Runner(executor="docker", workspace=".") as r:
        res = r.call("read", {"path": "a.txt"})

Guardrails, in order: the guard pipeline of runner/controller/guards.py (gate → args size and depth → schema
validation → rate limit → approval → protected paths → quota), the same for built-in and custom
tools → execute with a timeout → truncate → redact → audit.
"""
from __future__ import annotations

import os
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from ..errors import ErrorType, RunnerError
from .output import OTHER_MAX_CHARS, Caps, ResultStore
from ..results import ToolResult
from .interface import ToolRunner

if TYPE_CHECKING:
    from ..tools.schemas.registry import ToolSpec

CALL_GRACE = 30.0  # seconds the controller waits beyond a tool's own timeout


class Runner(ToolRunner):
    """Run tool calls under a policy (a preset name, a YAML file or a Policy; default `default`).

    Keyword shortcuts override the policy: executor, preset, lifecycle, image, runtime,
    pool_size; any other field through `overrides={"limits.memory": "2g", ...}`. The backend the
    policy names (`sandbox.executor`) takes its own settings from `backend` (its config, e.g.
    runner.backends.docker.DockerBackend, or a dict) and the shortcuts `ssh=` (an
    executors.ssh.SSHConfig) and `egress_network=`.
    """

    def __init__(self, executor: str | None = None, workspace: str | os.PathLike = ".", policy: Any = None, *,
                 protect: tuple[str, ...] | list[str] = (), pool_size: int | None = None, session: str | None = None,
                 preset: str | None = None, lifecycle: str | None = None, image: str | None = None,
                 runtime: str | None = None, overrides: dict[str, Any] | None = None, tenant: str | None = None,
                 egress_network: str | None = None, ssh: Any = None, backend: Any = None,
                 dialect: str | None = None, snapshot: Any = None) -> None:
        from .. import backends
        from ..reporting.audit import AuditLog
        from ..policy import Policy, load
        from ..policy.protect import Guard
        from ..policy.ratelimit import RateLimiter
        from ..reporting.redact import Redactor
        from .session import Session

        self.workspace = Path(os.path.realpath(Path(workspace).expanduser()))  # never raises on a loop
        if not self.workspace.is_dir():
            raise RunnerError(f"workspace {self.workspace} is not a directory")
        restored = None
        if snapshot is not None:  # the workspace filled first: the protected paths are found in it
            from . import snapshots

            restored = snapshots.lookup(snapshot, snapshots.Store(tenant=tenant))
            snapshots.restore_workspace(restored, self.workspace)
        base = policy if isinstance(policy, Policy) else load(policy or "default")
        ov = dict(overrides or {})
        for key, value in (("sandbox.executor", executor), ("tools.preset", preset), ("sandbox.lifecycle", lifecycle),
                           ("sandbox.image", image), ("sandbox.runtime", runtime), ("sandbox.pool_size", pool_size),
                           ("tenant", tenant), ("dialect", dialect)):
            if value is not None:
                ov[key] = value
        self.policy = base.effective(protect=list(protect), overrides=ov, workspace=self.workspace)
        try:
            self.backend = backends.for_policy(self.policy.sandbox.executor, backend, ssh=ssh,
                                               egress_network=egress_network)
        except ValueError as e:  # pydantic's ValidationError included
            raise RunnerError(f"backend {self.policy.sandbox.executor}: {e}") from None
        from ..tools.dialects import get as get_dialect

        self.dialect = get_dialect(self.policy.dialect)  # None, or the tool set of another agent system
        from ..policy.broker import Broker

        self.broker = Broker(self.policy, self.workspace)  # secrets with hosts: placeholders in the sandbox
        self.sandbox_env = self.policy.sandbox_env(workspace=self.workspace, placeholders=self.broker.placeholders)
        self.redactor = Redactor(self.policy.resolve_secrets(workspace=self.workspace))
        self.limiter = RateLimiter.from_policy(self.policy.rate_limits)
        self.audit = AuditLog.from_policy(self.policy.audit, self.redactor)
        self.session_id = session or uuid.uuid4().hex[:12]
        # the sandboxes: where they are, the protected paths, one op at a time (runner/controller/session.py)
        self.session = Session(backends.Setting(self.workspace, self.policy, self.session_id, broker=self.broker,
                                                on_egress=self._audit_egress), self.backend, self.sandbox_env)
        self.session.restore_tmp = restored  # (its /tmp, in the first sandbox)
        self.placement = self.session.placement
        self.protected = self.session.protected
        self._custom = None  # custom.Catalog, described in the sandbox on first use
        self.guard = Guard(self.workspace, self.protected)
        caps = self.policy.limits.output
        self.stream_caps = Caps(caps.chars, caps.lines)
        self.store = ResultStore(keep=caps.keep)
        self.store.redactor = self.redactor  # what a call gives its on_output is redacted too
        self._host_exec = None
        self._host_cancel = threading.Event()  # set by cancel() while a host command runs
        self._lock = threading.RLock()
        self._running: str | None = None  # the call id of the call under way (cancel), under _cancel_lock
        self._cancel_lock = threading.Lock()
        self._closing = False  # close() began: a call it cancels says so
        self._count = 0
        self._guard_ctx = None  # guards.Context, made on the first call (_guards)
        self._closed = False
        self._may_have_written = False  # the call running passed the guards and may write
        self._measuring = None  # (thread, box): the workspace measured after the last call that may write

    @property
    def lifecycle(self) -> str:
        return self.policy.sandbox.lifecycle

    # -- lifecycle ----------------------------------------------------------------------
    def __enter__(self) -> "Runner":
        try:
            self.start()
        except BaseException:  # an interrupt or a failure half-way: __exit__ will not run
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> "Runner":
        with self._lock:
            self.session.start()
        return self

    def _audit_egress(self, ev: dict) -> None:
        """One request the egress proxy saw, in the audit log."""
        if self.audit is not None and ev.get("event") == "egress":
            self.audit.record_egress(ev, session=self.session_id, tenant=self.policy.tenant)

    def update_policy(self, changes: dict) -> dict:
        """Change the network policy of this live session, for its next connections (within a
        second: the proxy reads it at once): {"network": {"allow": [...], "tls_ca_file": {...}},
        "secrets": {NAME: {"hosts": [...]}}} (a brokered secret's hosts only). Audited. Returns
        the new network section and brokered hosts. Raises RunnerError (PolicyError) and leaves
        the session as it was when the change is not allowed."""
        from .live_policy import apply

        return apply(self, changes)

    def _close_audit(self) -> None:
        if self.audit is not None:
            self.audit.close()

    def close(self, wait: bool = False) -> None:
        """Remove everything this Runner started. The sandboxes are closed at once; their
        containers are removed after the answer (runner/controller/finisher.py: before this process exits),
        or before it with wait=True (runner serve: a tenant's containers are counted). A signal
        in the middle (KeyboardInterrupt, runner/cli/interrupts.py, which ignores the signals after
        it) does not cut this short: the step it hit runs again and the others still run; then
        the interrupt goes on. From another thread, it ends the call under way at once (cancel)."""
        self._closing = True
        self.cancel()
        with self._lock:
            if self._closed:
                return
            self._closed = True
            interrupted = None
            for step in (*self.session.close_steps(wait), self._close_host, self.store.close,
                         lambda: self.limiter.forget(self.session_id), self._close_audit):
                try:
                    step()
                except KeyboardInterrupt as e:
                    interrupted = interrupted or e
                    step()
            if interrupted is not None:
                raise interrupted

    # -- files --------------------------------------------------------------------------
    def put_file(self, path: str, data: bytes) -> None:
        """Write a workspace file (path relative to it) in the sandbox, under the tools' rules
        (runner/controller/files.py): a protected path raises PermissionError."""
        from . import files

        with self._lock:
            self._open()
            files.put(self, path, data)

    def get_file(self, path: str) -> bytes:
        """The bytes of a workspace file, read in the sandbox (FileNotFoundError, IsADirectoryError, ...)."""
        from . import files

        with self._lock:
            self._open()
            return files.get(self, path)

    def list_files(self, path: str = ".") -> list[str]:
        """The names in a workspace directory, sorted, a directory's ending with '/'."""
        from . import files

        with self._lock:
            self._open()
            return files.listing(self, path)

    def _open(self) -> None:
        if self._closed:
            raise RunnerError("this Runner is closed")

    def _close_host(self) -> None:
        if self._host_exec is not None:
            self._host_exec.stop()

    # -- state: pause, resume, snapshots, forks (runner/controller/snapshots.py) ---------
    def pause(self) -> bool:
        """Freeze the session's sandbox (the engine's pause: no CPU) until resume() or the next
        call. False when no sandbox runs to freeze (per-call lifecycle, or none started yet)."""
        with self._lock:
            return self.session.pause()

    def resume(self) -> bool:
        """Thaw a paused session (a call does it too); False when it was not paused."""
        with self._lock:
            return self.session.resume()

    def snapshot(self, name: str | None = None, *, store: Any = None) -> str:
        """Snapshot the session now (workspace, /tmp, env and cwd): its id, for Runner(snapshot=ID)."""
        from . import snapshots

        return snapshots.take(self, store or snapshots.Store(tenant=self.policy.tenant), name)["id"]

    def fork(self, n: int = 1, **kwargs: Any) -> list["Runner"]:
        """n new Runners (started), each from a snapshot of this session taken now, on a new
        workspace of its own under the data directory's forks/; kwargs as Runner's (the policy
        is this one's unless given)."""
        from . import snapshots

        if not 1 <= n <= 100:
            raise RunnerError("fork: n is 1 to 100")
        store = snapshots.Store(tenant=self.policy.tenant)
        sid = self.snapshot(f"fork of {self.session_id}", store=store)
        from concurrent.futures import ThreadPoolExecutor

        def one(ws) -> "Runner":
            r = Runner(workspace=ws, snapshot=sid, **{"policy": self.policy, **kwargs})
            try:
                return r.start()
            except BaseException:
                r.close()
                raise

        try:  # made and started side by side: the engine creates their containers at once
            with ThreadPoolExecutor(max_workers=min(n, 8), thread_name_prefix="runner-fork") as pool:
                futures = [pool.submit(one, ws) for ws in snapshots.fork_workspaces(n, self.workspace)]
            errors = [f.exception() for f in futures if f.exception() is not None]
            out = [f.result() for f in futures if f.exception() is None]
            if errors:
                for r in out:
                    r.close()
                raise errors[0]
        finally:  # (each fork took it at its start)
            store.remove(sid)
        return out

    # -- tools --------------------------------------------------------------------------
    def tools(self) -> "list[ToolSpec]":
        """The specs of the tools this runner allows."""
        from ..tools.schemas import registry

        preset = registry.preset(self.policy.tools.preset)
        found = self.custom_tools()
        custom = [s for n, s in found.items() if self.policy.tool_gate(n, preset, custom=True) is None]
        return [s for s in registry.all_specs() if s.name not in found and self.policy.tool_gate(s.name, preset) is None
                ] + custom

    def custom_tools(self) -> dict:
        """{name: CustomSpec} of the custom tools found (described in the sandbox once, on first use)."""
        with self._lock:
            if self._custom is None:
                self._custom = self._discover()
            return self._custom.tools

    def _discover(self):
        """custom.discover, unless the policy allows no custom tool: then nothing is described
        (describing runs each tool's program in the sandbox)."""
        from ..tools import custom

        if self._custom_off():
            return custom.Catalog()
        return custom.discover(self.session)

    def _custom_off(self) -> str | None:
        from ..tools.schemas import registry

        return self.policy.custom_tools_gate(registry.preset(self.policy.tools.preset))

    def custom_errors(self) -> list[dict]:
        """The custom tools that were skipped, each with its place, path and the reason."""
        self.custom_tools()
        return [e for e in self._custom.errors if not e.get("overridden")]

    def refresh_tools(self) -> dict:
        """Rescan the custom tool places: {added, removed, changed, errors, report}."""
        from ..tools import custom

        with self._lock:
            old, self._custom = self._custom, self._discover()
            ch = custom.changes(old, self._custom)
            return {**ch, "errors": self.custom_errors(), "report": custom.report(ch, self._custom)}

    def warnings(self) -> list[str]:
        """What must be said loudly before this Runner runs a tool: its policy's (the local
        executor is no sandbox) and its placement's (a sandbox that runs as root)."""
        return self.policy.warnings() + self.session.placement.warnings()

    def call(self, tool: str, args: dict | None = None, *, call_id: str | None = None,
             on_output: Callable[[str], None] | None = None) -> ToolResult:
        """Run one tool call. Never raises for a tool's failure: that is a result with is_error.

        on_output(text): given a streaming tool's output (its spec's `streams`: bash, exec, a
        dialect's tool that runs one of them) as it is produced, in order, before call returns,
        on the thread that called call. The text is redacted as the result is (a secret split
        across pieces included: a piece that may be the start of one waits for the next), so
        the pieces joined are the output redacted, not cut to the answer's caps. A callback that
        raises an Exception is given nothing more of that call; the call runs on, and its
        result's meta has `on_output_error` (the exception's type and text)."""
        with self._lock:
            self._open()
            self._count += 1
            call_id = call_id or f"c{self._count}"
            with self._cancel_lock:
                self._running = call_id
            try:
                return self._call_now(tool, args, call_id, on_output)
            finally:
                with self._cancel_lock:
                    self._running = None
                self.session.forget(call_id)

    def cancel(self, call_id: str | None = None) -> bool:
        """Cancel the call under way (any thread may; call_id: only if it is that one): its sandbox
        op is stopped, its processes killed with the sandbox, before this returns, and the call
        returns a result with is_error and meta `cancelled`; the next call gets a fresh sandbox
        (the workspace is kept). False when no such call is under way. Ctrl-C does the same to
        the call of the main thread, then raises KeyboardInterrupt."""
        with self._cancel_lock:
            running = self._running
            if running is None or (call_id is not None and call_id != running):
                return False
            self.session.cancel(running)
            self._host_cancel.set()  # a host command under way (cleared as the next one starts)
            return True

    def _call_now(self, tool: str, args: dict | None, call_id: str, on_output) -> ToolResult:
        """call, under the Runner's lock, with its call id."""
        t0 = time.monotonic()
        meta = {"call_id": call_id, "tool": tool, "session": self.session_id}
        args = args if args is not None else {}
        # A dialect translates the call to a native one, runs it through _call, and shapes the answer.
        try:
            result = (self.dialect.call(self, tool, args, call_id, meta, on_output) if self.dialect is not None
                      else self._call(tool, args, call_id, meta, on_output))
        finally:
            if self._may_have_written:
                self._may_have_written = False
                self._measure_soon()
        if result.is_error and self.session.cancelled(call_id):  # (one that ended first keeps its result)
            result = ToolResult.error(
                "the Runner was closed during this call: its processes were stopped with its sandbox" if self._closing
                else "the call was cancelled: its processes were stopped with its sandbox; the next call gets a fresh "
                     "sandbox (the workspace is kept)", error_type=ErrorType.EXECUTION, cancelled=True)
        result.meta = {**meta, **result.meta, "duration_ms": round((time.monotonic() - t0) * 1000, 1)}
        content = self.redactor.redact_obj(result.content)  # blocks are rebuilt: redaction may turn an image to text
        result.content = content if isinstance(content, str) else ToolResult(content=content).content
        result.meta = self.redactor.redact_obj(result.meta)
        if self.audit is not None:
            self.audit.record_result(call_id=call_id, tool=meta["tool"], args=args, result=result,
                                     session=self.session_id, tenant=self.policy.tenant,
                                     dialect=meta.get("dialect"), dialect_tool=meta.get("dialect_tool"))
        return result

    def _call(self, tool: str, args: Any, call_id: str, meta: dict,
              on_output: Callable[[str], None] | None = None) -> ToolResult:
        """The guard pipeline (runner/controller/guards.py), then the tool: custom ones in the sandbox,
        result and refresh_tools here, host commands over SSH, the rest in the sandbox.
        on_output: call's, given the output of a tool that streams (its spec says)."""
        from . import guards

        spec = self._spec(tool)
        if spec is None:
            return self._unknown(tool)
        call = guards.Call(tool, spec, args)
        refused = guards.check(self._guards(), call)
        if refused is not None:
            return refused
        self._may_have_written = bool(self.policy.limits.workspace) and not (call.builtin and
                                                                             tool in guards.QUOTA_FREE)
        args = call.args
        if not call.builtin:
            from ..tools import custom

            meta.update(source=spec.source, kind=spec.kind)
            return self._run_in_sandbox("custom_run", custom.operation(spec, args, self.policy), call_id)
        if spec.repo_programs and not self.policy.features.bash:
            args["no_repo_programs"] = True  # the repository's config must not run what bash may not
        if spec.on_controller:
            return getattr(self, spec.on_controller)(args)
        streams = spec.streams
        if streams or "timeout" in args:
            requested = args.get("timeout")
            args["timeout"] = self.policy.limits.timeout_for(tool, requested)
            if requested is not None and args["timeout"] < requested:
                meta["timeout_capped_to"] = args["timeout"]
        if streams and self.policy.host_commands:
            from ..host import route as hostroute

            host_rules = hostroute.rules(self.policy)
            if hostroute.wants_host(args["command"], host_rules):
                return self._run_on_host(spec, args, call_id, host_rules, on_output)
        return self._run_in_sandbox(tool, args, call_id, streams, on_output if streams else None)

    def _spec(self, tool: Any):
        """The ToolSpec of a tool name: a custom tool first (it may shadow a built-in when the
        policy allows that), then a built-in; None when there is no such tool."""
        from ..tools.schemas import registry

        if not isinstance(tool, str):
            return None
        spec = self.custom_tools().get(tool)
        if spec is None and registry.exists(tool):
            spec = registry.get(tool)
        return spec

    def _unknown(self, tool: Any) -> ToolResult:
        names = ", ".join(s.name for s in self.tools())
        off = self._custom_off()
        if off:  # it may be a custom tool that was never loaded
            return ToolResult.error(f"unknown tool: {str(tool)[:100]}; it is no built-in, and {off}. Tools that "
                                    f"exist here: {names}", error_type=ErrorType.GATED)
        return ToolResult.error(f"unknown tool: {str(tool)[:100]}. Tools that exist here: {names}",
                                error_type=ErrorType.VALIDATION)

    def _guards(self):
        """What the guard steps consult (runner/controller/guards.py): made once, it holds nothing that changes."""
        if self._guard_ctx is None:
            from . import guards

            self._guard_ctx = guards.Context(
                policy=self.policy, session=self.session_id, limiter=self.limiter, approve=self._approve,
                check_writable=lambda path: self.guard.check_writable(self.placement.host_path(path.lstrip("@"))),
                over_quota=self._over_quota, allowed=lambda: [s.name for s in self.tools()])
        return self._guard_ctx

    def _run_on_host(self, spec, args: dict, call_id: str, host_rules, on_output=None) -> ToolResult:
        """A host command: over SSH to the policy's host, in the mapped directory, under bash's
        timeout and exit-code rules."""
        from executors import ExecRequest, ExecutorError
        from executors.errors import ExecCancelled
        from executors.models import TIMEOUT_EXIT
        from executors.ssh import SSHConfig, SSHExecutor

        from ..host import route as hostroute
        from ..host.shell import CommandRefused

        if spec.background and args.get(spec.background):
            return ToolResult.error("background mode is refused for host commands: run it in the foreground",
                                    error_type=ErrorType.GATED)
        if self.policy.host is None:
            return ToolResult.error("the policy lists host_commands but names no host to run them on (policy key "
                                    "host: {host, user, key_file, known_hosts})", error_type=ErrorType.GATED)
        sandbox_ws = self.placement.workspace
        host = self.policy.host
        if host.forced_command and host.env:
            return ToolResult.error("the policy's host has forced_command and env: a forced-command host receives "
                                    "only the request; set the environment in its authorized_keys line instead",
                                    error_type=ErrorType.GATED)
        try:
            argv = hostroute.route(args["command"], host_rules)
            cwd = hostroute.host_dir(args.get("cwd") or args.get("working_dir") or "", sandbox_ws, self.workspace)
            sent = hostroute.invocation(argv, cwd, args["timeout"], host_rules, host, str(self.workspace))
        except CommandRefused as e:
            return ToolResult.error(str(e), error_type=ErrorType.GATED)
        if self._host_exec is None:
            self._host_exec = SSHExecutor(SSHConfig(**host.model_dump(exclude={"runner"})))
        sink = self.store.sink(call_id, self.stream_caps, on_output)
        err = [] if args.get("separate_stderr") else None

        def from_host(stream: str, data: bytes) -> None:
            if err is not None and stream == "stderr":
                err.append(data)
            else:
                sink.write(data.decode("utf-8", "replace"))

        # The host kills the command itself once the client hangs up or its timeout has long passed.
        req = ExecRequest(argv=sent, timeout=args["timeout"],
                          stdin=args["input"].encode() if args.get("input") else None)
        try:
            with self.placement.frozen():
                self._host_cancel.clear()
                if self.session.cancelled(call_id):  # cancelled before it started: it does not
                    raise ExecCancelled("cancelled before it ran")
                res = self._host_exec.exec(req, on_output=from_host, cancel=self._host_cancel)
        except ExecutorError as e:
            sink.finish()
            return ToolResult.error(f"host command failed to run: {e}", error_type=ErrorType.EXECUTION)
        suffix = ""
        if res.timed_out:
            suffix = (f"timed out after {args['timeout']:g}s: the command and all its processes were killed "
                      f"(exit code {TIMEOUT_EXIT})")
        elif res.exit_code == 127 and not host.forced_command:
            suffix = (f"exit code: 127 (if `{host.runner}` was not found on the host, set the policy's host.runner "
                      "to the path of runner there)")
        elif res.exit_code != 0:
            suffix = f"exit code: {res.exit_code}"
        msg = {"content": suffix, "is_error": bool(suffix),
               "meta": {"streamed": True, "exit_code": res.exit_code, "timed_out": res.timed_out, "ran_on": "host",
                        "host_argv": argv, "host_cwd": cwd}}
        if err is not None:
            msg["meta"]["stderr"] = b"".join(err).decode("utf-8", "replace")
        return self._compose(msg, sink)

    def _approve(self, tool: str, args: dict):
        """The policy's approval rule. `ask` asks on the controlling terminal, never on stdin:
        `runner session` reads calls there, and a call line must not be able to say yes."""
        from ..policy.approval import decide

        rule = self.policy.approval
        if rule != "ask":
            return decide(rule, tool, args, redact=self.redactor.redact)
        try:
            tty = open_tty()
        except OSError:
            return decide(rule, tool, args, is_tty=lambda: False, redact=self.redactor.redact)
        with tty:
            return decide(rule, tool, args, stdin=tty, stderr=tty, is_tty=lambda: True, redact=self.redactor.redact)

    def _measure_soon(self) -> None:
        """Measure the workspace now that a call that may write has ended, on a thread of its
        own: the walk runs while the agent thinks, and the next call's quota step takes it."""
        from ..untrusted.wspath import usage

        quota, box = self.policy.limits.workspace, {}
        t = threading.Thread(target=lambda: box.update(u=usage(self.workspace, stop_after=quota)),
                             name="runner-quota", daemon=True)
        t.start()
        self._measuring = (t, box)

    def _over_quota(self, adding: int = 0) -> str | None:
        """Why a call must be refused under limits.workspace, or None. Checked before every call
        that may write, on the workspace as the last such call left it (measured as it ended, by
        wspath.usage: bytes, every entry at least a block), or as it is now when there is no such
        measure, or it is not whole, or it says over (files may have been removed since); one
        call can still overshoot, the next is refused (see SECURITY.md)."""
        from ..policy.model import format_size
        from ..untrusted.wspath import usage

        quota = self.policy.limits.workspace
        if not quota:
            return None
        pending, self._measuring, u = self._measuring, None, None
        if pending is not None:
            pending[0].join()
            u = pending[1].get("u")
        if u is None or not u.complete or u.used + adding > quota:
            for _ in range(3):  # a walk the sandbox disturbed (a directory moved under it) is taken again
                u = usage(self.workspace, stop_after=quota)
                if u.complete or u.used > quota:
                    break
            else:
                return ("the workspace's size could not be measured whole (a directory runner cannot enter, or "
                        "directories moved during the walk): the quota refuses what may write until it can")
        if u.used + adding > quota:
            shown = f"more than {format_size(quota)}" if not u.complete else format_size(u.used)
            return (f"workspace quota exceeded: {shown} used of {format_size(quota)} (every file, directory and "
                    f"link counts, each at least 4 KiB; this call adds {adding} bytes); only reading tools run "
                    "until files are removed")
        return None

    def _refresh_tool(self, args: dict) -> ToolResult:
        """refresh_tools: rescan the custom tool folders, answer the tool names and the report."""
        report = self.refresh_tools()["report"]
        return ToolResult(content="tools: " + ", ".join(s.name for s in self.tools()) + "\n" + report)

    def _result_tool(self, args: dict) -> ToolResult:
        text = self.store.page(args["call_id"], args.get("offset") or 1, args.get("limit") or 2000)
        if text is None:
            return ToolResult.error(f"no kept output for call_id {args['call_id']}: only truncated outputs of this "
                                    "session are kept", error_type=ErrorType.VALIDATION)
        return ToolResult(content=text)

    # -- sandboxes ----------------------------------------------------------------------
    def _run_in_sandbox(self, tool: str, args: dict, call_id: str, streams: bool = False,
                        on_output: Callable[[str], None] | None = None) -> ToolResult:
        """One op in a sandbox of the session, its output streamed into the result store (and
        to on_output). streams: the tool's output comes as it is produced (its spec's caps)."""
        from .sandbox import NoSandbox, SandboxDied

        timeout = float(args.get("timeout") or self.policy.limits.timeout) + CALL_GRACE
        caps = self.stream_caps if streams else Caps(OTHER_MAX_CHARS, None)
        sink = self.store.sink(call_id, caps, on_output)
        try:
            msg = self.session.run(call_id, tool, args, timeout, on_output=sink.write)
        except NoSandbox as e:
            return ToolResult.error(str(e), error_type=ErrorType.EXECUTION)
        except SandboxDied as e:
            sink.finish()  # what on_output has not been given yet (a held last line) goes to it now
            return ToolResult.error(f"the sandbox died during this call ({e}). Nothing of this call can be trusted "
                                    "to have completed; a fresh sandbox will serve the next call.",
                                    error_type=ErrorType.EXECUTION)
        return self._compose(msg, sink)

    def _apart(self, sink, text: str) -> dict:
        """A stream the sandbox kept apart from the output (stderr), cut head and tail by the
        output's caps; when cut, the whole is kept as `<call_id>.stderr` for the result tool."""
        err = self.store.sink(f"{sink.call_id}.stderr", sink.caps)  # no on_output: the call streams stdout alone
        err.write(text)
        cut, tmeta = err.finish()
        out = {"stderr": cut, "stderr_chars": tmeta["output_chars"], "stderr_truncated": tmeta["truncated"]}
        if tmeta["truncated"]:
            out["stderr_kept_as"] = tmeta["kept_as"]
        return out

    def _compose(self, msg: dict, sink) -> ToolResult:
        meta = dict(msg.get("meta") or {})
        content = msg.get("content")
        is_error = bool(msg.get("is_error"))
        if meta.get("streamed"):
            text, tmeta = sink.finish()
            meta.update(tmeta)
            if isinstance(meta.get("stderr"), str):  # kept apart (bash separate_stderr): cut by the same caps
                meta.update(self._apart(sink, meta.pop("stderr")))
            suffix = content or ""
            if text and suffix:
                text = (text if text.endswith("\n") else text + "\n") + suffix
            content = text or suffix or "(no output)"
        elif isinstance(content, str) and len(content) > OTHER_MAX_CHARS:
            sink.write(content)
            content, tmeta = sink.finish()
            meta.update(tmeta)
        if meta.get("timed_out"):
            meta["error_type"] = str(ErrorType.TIMEOUT)
        elif is_error:  # the sandbox's word is taken only for a type of the contract
            if meta.get("error_type") not in (ErrorType.VALIDATION, ErrorType.GATED):
                meta["error_type"] = str(ErrorType.EXECUTION)
        else:
            meta.pop("error_type", None)
        return ToolResult(content=content if content is not None else "", is_error=is_error, meta=meta)



def open_tty(path: str = "/dev/tty"):
    """The controlling terminal, for questions to the person at it (OSError when there is none).
    Unbuffered underneath: a buffered "r+" needs a seekable file, and a terminal is not one."""
    import io

    raw = open(path, "r+b", buffering=0)
    return io.TextIOWrapper(raw, encoding="utf-8", errors="replace", line_buffering=True, write_through=True)


def make_runner(workspace: str, executor: str | None, policy: str | None, protect: list[str],
                dialect: str | None = None, *, warned: bool = True, one_call: bool = False,
                snapshot: str | None = None):
    """The Runner of a command that runs tools. warned: its warnings (warn) said now, else the
    caller says them once the engine answered (an engine that does not is one line alone).
    one_call: it makes one call and ends (`runner call`): one sandbox, told so (per-call, no warm
    pool), whatever the policy's lifecycle; the same call either way. snapshot: the session
    starts from it (an empty workspace)."""
    kw: dict[str, Any] = {"lifecycle": "per-call", "pool_size": 0} if one_call else {}
    if snapshot:
        kw["snapshot"] = snapshot
    r = Runner(executor=executor, workspace=workspace, policy=policy, protect=protect, dialect=dialect, **kw)
    if warned:
        try:
            warn(r.warnings())
        except BaseException:
            r.close()
            raise
    return r


_warned: set[str] = set()


def warn(lines: list[str]) -> None:
    """Each warning on stderr, once a process (`runner mcp` makes a Runner per session)."""
    for line in lines:
        if line not in _warned:
            _warned.add(line)
            sys.stderr.write(f"runner: warning: {line}\n")
