"""Background jobs started by `exec` with background: their output, state and control.

The job table is the agent's only state that outlives a call. Each job keeps at most
BUFFER_CHARS of its newest output; older output is dropped and counted.
"""
from __future__ import annotations

import codecs
import os
import select
import subprocess
import threading
import time
from typing import Dict, List, Optional, Tuple

from . import proctree

BUFFER_CHARS = 1 << 20
MAX_FINISHED = 50


class Job:
    def __init__(self, proc: subprocess.Popen, command: str, cwd: str, timeout: Optional[float]) -> None:
        self.proc = proc
        self.pid = proc.pid
        self.command = command
        self.cwd = cwd
        self.timeout = timeout
        self.started = time.monotonic()
        self.ended: Optional[float] = None
        self.timed_out = False
        self.killed = False
        self._text = ""
        self._total = 0  # characters produced so far
        self._read_to = 0  # offset poll has returned up to
        self._lock = threading.Condition()
        self._thread = threading.Thread(target=self._pump, name=f"job-{self.pid}", daemon=True)
        self._thread.start()

    # -- the reader thread ------------------------------------------------------------------
    def _pump(self) -> None:
        fd = self.proc.stdout.fileno()
        dec = codecs.getincrementaldecoder("utf-8")("replace")
        deadline = self.started + self.timeout if self.timeout else None
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        try:
            while True:
                wait = 1.0
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        self.timed_out = self.proc.poll() is None
                        proctree.kill_tree(self.proc)
                        deadline = None
                        continue
                    wait = min(wait, left)
                if not poller.poll(wait * 1000):
                    if self.proc.poll() is not None and self.ended is None:
                        self._finish()
                    continue
                data = os.read(fd, 65536)
                if not data:
                    break
                self._add(dec.decode(data))
            self._add(dec.decode(b"", True))
        except OSError:
            pass
        finally:
            try:
                self.proc.stdout.close()
            except OSError:
                pass
            while deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    self.timed_out = True
                    proctree.kill_tree(self.proc)
                    break
                try:
                    self.proc.wait(timeout=left)
                    break
                except subprocess.TimeoutExpired:
                    continue
            self.proc.wait()
            self._finish()

    def _add(self, text: str) -> None:
        if not text:
            return
        with self._lock:
            self._text += text
            self._total += len(text)
            if len(self._text) > 2 * BUFFER_CHARS:
                self._text = self._text[-BUFFER_CHARS:]
            self._lock.notify_all()

    def _finish(self) -> None:
        with self._lock:
            if self.ended is None and self.proc.poll() is not None:
                self.ended = time.monotonic()
            self._lock.notify_all()

    # -- what `process` asks ------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self.proc.poll() is None

    @property
    def exit_code(self) -> Optional[int]:
        if self.proc.returncode is None:
            return None
        return 124 if self.timed_out else proctree.exit_status(self.proc.returncode)

    @property
    def runtime(self) -> float:
        end = self.ended if self.ended is not None and not self.running else time.monotonic()
        return round(end - self.started, 1)

    def state(self) -> str:
        if self.running:
            return "running"
        rc = self.proc.returncode
        if self.timed_out:
            return f"timed out after {self.timeout:g}s (killed)"
        if rc is not None and rc < 0:
            return f"killed by signal {-rc}"
        return f"exited with code {rc}"

    def tail(self, chars: int) -> str:
        with self._lock:
            return self._text[-chars:]

    def take_new(self) -> Tuple[str, int]:
        """Output poll has not returned yet, and how many characters of it were dropped."""
        with self._lock:
            start = self._total - len(self._text)
            dropped = max(0, start - self._read_to)
            text = self._text[max(0, self._read_to - start):]
            self._read_to = self._total
            return text, dropped

    def wait_for_news(self, seconds: float) -> None:
        """Block up to `seconds` until new output appears or the job ends."""
        end = time.monotonic() + seconds
        with self._lock:
            while self._total == self._read_to and self.running:
                left = end - time.monotonic()
                if left <= 0:
                    return
                self._lock.wait(min(left, 0.2))

    @property
    def total_chars(self) -> int:
        return self._total

    def send(self, data: str, eof: bool) -> None:
        if self.proc.stdin is None or self.proc.stdin.closed:
            raise ValueError("its stdin is closed")
        if data:
            self.proc.stdin.write(data.encode("utf-8", "replace"))
            self.proc.stdin.flush()
        if eof:
            self.proc.stdin.close()

    def kill(self) -> None:
        self.killed = True
        proctree.kill_tree(self.proc)
        self._thread.join(timeout=5)


class JobTable:
    def __init__(self) -> None:
        self.jobs: Dict[int, Job] = {}

    def start(self, ctx, command: str, cwd: str, timeout: Optional[float], input_text: Optional[str]) -> Job:
        proc = proctree.spawn(ctx, command, cwd, stdin_pipe=True)
        job = Job(proc, command, cwd, timeout)
        if input_text:
            try:
                job.send(input_text, eof=False)
            except (OSError, ValueError):
                pass
        self.jobs[job.pid] = job
        self._forget_old()
        return job

    def get(self, pid) -> Optional[Job]:
        try:
            return self.jobs.get(int(str(pid).strip()))
        except ValueError:
            return None

    def all(self) -> List[Job]:
        return [self.jobs[k] for k in sorted(self.jobs)]

    def _forget_old(self) -> None:
        done = sorted((j for j in self.jobs.values() if not j.running), key=lambda j: j.started)
        for j in done[:max(0, len(done) - MAX_FINISHED)]:
            del self.jobs[j.pid]

    def kill_all(self) -> None:
        for job in list(self.jobs.values()):
            if job.running:
                try:
                    job.kill()
                except Exception:
                    pass
