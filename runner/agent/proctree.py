"""Starting commands in their own session, and killing a command's whole process tree."""
from __future__ import annotations

import os
import select
import shutil
import signal
import subprocess
import time
from typing import Dict, List, Optional, Set

KILL_GRACE = 1.5  # seconds between TERM and KILL


def shell_argv(command: str) -> List[str]:
    sh = shutil.which("bash") or shutil.which("sh") or "/bin/sh"
    return [sh, "-c", command]


def spawn(ctx, command: str, cwd: str, stdin_pipe: bool) -> subprocess.Popen:
    """`bash -c command` in a new session: one pipe for stdout and stderr interleaved."""
    return subprocess.Popen(shell_argv(command), cwd=cwd, env=ctx.child_env(),
                            stdin=subprocess.PIPE if stdin_pipe else subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                            close_fds=True, bufsize=0)


def wait_exit(proc: subprocess.Popen, timeout: float) -> bool:
    """Wait up to `timeout` seconds for proc to end; True when it has. Sleeps on a pidfd when
    the kernel has them (Popen.wait with a timeout polls in growing sleeps: slow for short
    commands)."""
    if proc.poll() is not None:
        return True
    pidfd_open = getattr(os, "pidfd_open", None)
    if pidfd_open is not None:
        try:
            fd = pidfd_open(proc.pid)
        except OSError:
            fd = -1
        if fd >= 0:
            try:
                p = select.poll()
                p.register(fd, select.POLLIN)
                p.poll(max(0.0, timeout) * 1000)
            finally:
                os.close(fd)
            return proc.poll() is not None
    try:
        proc.wait(timeout=timeout)
        return True
    except subprocess.TimeoutExpired:
        return False


def _proc_table() -> Dict[int, tuple]:
    """pid -> (ppid, pgid, sid) of every process we can see (Linux /proc)."""
    table: Dict[int, tuple] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return table
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read().decode("ascii", "replace")
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2:].split()
        try:
            table[int(name)] = (int(fields[1]), int(fields[2]), int(fields[3]))
        except (IndexError, ValueError):
            continue
    return table


def tree(pid: int) -> Set[int]:
    """The processes that belong to a command started by spawn(): its descendants, plus
    everything still in its session or process group (orphans re-parented to init)."""
    table = _proc_table()
    found = {p for p, (_pp, pg, sid) in table.items() if pg == pid or sid == pid}
    children: Dict[int, List[int]] = {}
    for p, (pp, _pg, _sid) in table.items():
        children.setdefault(pp, []).append(p)
    stack = [pid]
    while stack:
        for c in children.get(stack.pop(), []):
            if c not in found:
                found.add(c)
                stack.append(c)
    found.discard(os.getpid())
    return found


def _signal_all(pgid: int, pids: Set[int], sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass
    for p in pids:
        try:
            os.kill(p, sig)
        except (ProcessLookupError, PermissionError):
            pass


def kill_tree(proc: subprocess.Popen, grace: float = KILL_GRACE) -> None:
    """TERM to the whole tree, then KILL after `grace` seconds to whatever is left."""
    pids = tree(proc.pid)
    _signal_all(proc.pid, pids, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if proc.poll() is not None and not _alive(pids | tree(proc.pid)):
            break
        time.sleep(0.05)
    _signal_all(proc.pid, pids | tree(proc.pid), signal.SIGKILL)
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def _alive(pids: Set[int]) -> bool:
    for p in pids:
        try:
            with open(f"/proc/{p}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[-1].split()[0]
            if state not in (b"Z", b"X"):
                return True
        except (OSError, IndexError):
            continue
    return False


def exit_status(returncode: Optional[int]) -> int:
    """A shell-style exit code: 128+N for a process killed by signal N."""
    if returncode is None:
        return -1
    return 128 - returncode if returncode < 0 else returncode


def parse_signal(value) -> int:
    """SIGTERM, TERM, term, 15 -> 15; ValueError when unknown."""
    if isinstance(value, int) or (isinstance(value, str) and value.strip().isdigit()):
        n = int(value)
        if 0 < n < 65:
            return n
        raise ValueError(f"signal number {n} is out of range")
    name = str(value or "").strip().upper()
    if not name.startswith("SIG"):
        name = "SIG" + name
    sig = getattr(signal, name, None)
    if not isinstance(sig, signal.Signals):
        raise ValueError(f"unknown signal {value!r}: use a name like TERM, INT, KILL, HUP, USR1 or a number")
    return int(sig)
