"""bash, exec and process: commands in their own process group, output streamed as produced.

A foreground command's output is never held whole: each chunk read from its pipe (at most
64 KiB) is sent to the controller at once as an `output` event, and the final result carries
only what follows it (`exit code: N`, `timed out after Ns`).
"""
from __future__ import annotations

import codecs
import os
import select
import subprocess
import threading
import time
from typing import Optional

from . import paths, proctree
from .result import Result, ToolError, error, ok

CHUNK = 64 * 1024
DEFAULT_TIMEOUT = 120.0
BACKGROUND_TIMEOUT = 1800.0
LINGER = 0.1  # after the command exits, how long to wait for output of what it left behind
LINGER_MAX = 2.0
STATUS_TAIL = 4000


def _seconds(value) -> str:
    return f"{value:g}"


def _timeout(value, default: float) -> float:
    if value is None:
        return default
    try:
        t = float(value)
    except (TypeError, ValueError):
        raise ToolError(f"timeout must be a number of seconds, got {value!r}") from None
    if not t > 0:
        raise ToolError(f"timeout must be more than 0 seconds, got {value!r}")
    return t


def _cwd(ctx, raw: Optional[str], name: str) -> str:
    return paths.resolve_dir(ctx, raw, name) if raw else ctx.workspace


def _feed(proc: subprocess.Popen, text: str) -> None:
    try:
        proc.stdin.write(text.encode("utf-8", "replace"))
    except (OSError, ValueError):
        pass
    finally:
        try:
            proc.stdin.close()
        except OSError:
            pass


def run_streamed(ctx, command: str, cwd: str, timeout: float, input_text: Optional[str] = None) -> Result:
    """Run `command`, emitting its output while it runs; kill the tree at the timeout."""
    if not isinstance(command, str) or not command.strip():
        return error("command is empty: give a shell command to run")
    try:
        proc = proctree.spawn(ctx, command, cwd, stdin_pipe=input_text is not None)
    except OSError as e:
        return error(f"could not start the shell: {e.strerror or e}")
    if input_text is not None:
        threading.Thread(target=_feed, args=(proc, input_text), daemon=True).start()
    fd = proc.stdout.fileno()
    dec = codecs.getincrementaldecoder("utf-8")("replace")
    poller = select.poll()
    poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
    deadline = time.monotonic() + timeout
    exited_at: Optional[float] = None
    timed_out = False
    try:
        while True:
            now = time.monotonic()
            if now >= deadline:
                timed_out = True
                break
            wait = min(deadline - now, 0.5)
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is not None:
                if now - exited_at > LINGER_MAX:
                    break
                wait = min(wait, LINGER)
            if not poller.poll(wait * 1000):
                if exited_at is not None:
                    break  # the command is done and nothing more came
                continue
            data = os.read(fd, CHUNK)
            if not data:
                break
            text = dec.decode(data)
            if text:
                ctx.emit(text)
        if timed_out:
            proctree.kill_tree(proc)
        tail = dec.decode(b"", True)
        if tail:
            ctx.emit(tail)
    except BaseException:  # the controller went away mid-stream (or we are told to stop)
        if proc.poll() is None:
            proctree.kill_tree(proc, grace=0.2)
        raise
    finally:
        try:
            proc.stdout.close()
        except OSError:
            pass
        if not timed_out and not proctree.wait_exit(proc, max(0.1, deadline - time.monotonic())):
            timed_out = True
            proctree.kill_tree(proc)
    if timed_out:
        return Result(f"timed out after {_seconds(timeout)}s", True,
                      {"streamed": True, "exit_code": 124, "timed_out": True})
    code = proctree.exit_status(proc.returncode)
    meta = {"streamed": True, "exit_code": code, "timed_out": False}
    if code != 0:
        return Result(f"exit code: {code}", True, meta)
    return Result("", False, meta)


def bash(ctx, args) -> Result:
    return run_streamed(ctx, args.get("command"), _cwd(ctx, args.get("cwd"), "cwd"),
                        _timeout(args.get("timeout"), DEFAULT_TIMEOUT))


def exec_(ctx, args) -> Result:
    command = args.get("command")
    cwd = _cwd(ctx, args.get("working_dir"), "working_dir")
    input_text = args.get("input")
    if not args.get("background"):
        return run_streamed(ctx, command, cwd, _timeout(args.get("timeout"), DEFAULT_TIMEOUT), input_text)
    if not isinstance(command, str) or not command.strip():
        return error("command is empty: give a shell command to run")
    timeout = _timeout(args.get("timeout"), BACKGROUND_TIMEOUT)
    try:
        job = ctx.jobs.start(ctx, command, cwd, timeout, input_text)
    except OSError as e:
        return error(f"could not start the shell: {e.strerror or e}")
    return ok(f"started background job {job.pid}: {_short(command)}\n"
              f"It runs for at most {_seconds(timeout)}s. See its output with process (action poll, pid {job.pid}); "
              f"stop it with process (action kill).", pid=job.pid, background=True)


def _short(command: str, n: int = 80) -> str:
    one = " ".join(command.split())
    return one if len(one) <= n else one[: n - 1] + "…"


def _job_meta(job) -> dict:
    return {"pid": job.pid, "state": "running" if job.running else "exited", "exit_code": job.exit_code,
            "runtime_s": job.runtime, "output_chars": job.total_chars}


def process(ctx, args) -> Result:
    action = (args.get("action") or "").strip().lower()
    if action == "list":
        jobs = ctx.jobs.all()
        if not jobs:
            return ok("no background jobs", jobs=0)
        lines = [f"{j.pid}\t{j.state()}\t{j.runtime:g}s\t{_short(j.command, 60)}" for j in jobs]
        return ok("pid\tstate\truntime\tcommand\n" + "\n".join(lines), jobs=len(jobs))
    if action not in ("status", "poll", "input", "signal", "kill"):
        return error(f"unknown action {action!r}: use list, status, poll, input, signal or kill")
    pid = args.get("pid")
    if pid in (None, ""):
        return error(f"process {action} needs pid: the number exec answered for the background job")
    job = ctx.jobs.get(pid)
    if job is None:
        known = ", ".join(str(j.pid) for j in ctx.jobs.all()) or "none"
        return error(f"no background job with pid {pid} (jobs: {known}); start one with exec and background true")
    if action == "status":
        tail = job.tail(STATUS_TAIL)
        text = (f"job {job.pid}: {job.state()}\ncommand: {_short(job.command, 200)}\nruntime: {job.runtime:g}s\n"
                f"output so far: {job.total_chars} characters")
        text += "\n--- newest output ---\n" + tail if tail else "\n(no output yet)"
        return ok(text, **_job_meta(job))
    if action == "poll":
        wait = args.get("wait") or 0
        try:
            wait = min(max(float(wait), 0.0), 300.0)
        except (TypeError, ValueError):
            return error(f"wait must be a number of seconds, got {wait!r}")
        if wait:
            job.wait_for_news(wait)
        text, dropped = job.take_new()
        head = f"[{dropped} older characters were dropped from the buffer]\n" if dropped else ""
        body = head + text if (text or head) else "(no new output)"
        return ok(f"{body.rstrip(chr(10))}\n[job {job.pid} {job.state()}, {job.runtime:g}s]", **_job_meta(job))
    if action == "input":
        data = args.get("data")
        if data is None:
            data = ""
        if not job.running:
            return error(f"job {job.pid} has {job.state()}: it cannot take input")
        try:
            job.send(str(data), bool(args.get("eof")))
        except (OSError, ValueError) as e:
            return error(f"could not write to job {job.pid}: {e}")
        return ok(f"sent {len(str(data))} characters to job {job.pid}" + (" and closed its stdin" if args.get("eof") else ""),
                  **_job_meta(job))
    if action == "signal":
        try:
            sig = proctree.parse_signal(args.get("signal") or "TERM")
        except ValueError as e:
            return error(str(e))
        if not job.running:
            return error(f"job {job.pid} has already {job.state()}")
        try:
            os.killpg(job.pid, sig)
        except ProcessLookupError:
            pass
        except PermissionError as e:
            return error(f"could not signal job {job.pid}: {e}")
        time.sleep(0.05)
        return ok(f"sent signal {sig} to job {job.pid}'s process group; it is {job.state()}", **_job_meta(job))
    if job.running:
        job.kill()
        return ok(f"killed job {job.pid}: {job.state()}", **_job_meta(job))
    return ok(f"job {job.pid} had already {job.state()}", **_job_meta(job))
