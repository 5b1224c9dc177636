"""A PostgreSQL server of the test's own (Debian's package): initdb in a temp directory, run as
the `postgres` user when the test runs as root, reached on a unix socket only; stopped after."""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time


def _bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    if not found:
        raise AssertionError(f"PostgreSQL's {name} is missing: scripts/setup.sh installs Debian's postgresql")
    return found[-1]


class Postgres:
    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="runner-pg-")
        self.proc: subprocess.Popen | None = None
        self.as_user: list[str] = []
        if os.geteuid() == 0:  # postgres refuses to run as root
            pw = pwd.getpwnam("postgres")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
            self.as_user = ["runuser", "-u", "postgres", "--"]

    @property
    def url(self) -> str:
        return f"postgresql://runner@/runner?host={self.dir}"

    def start(self) -> "Postgres":
        data = os.path.join(self.dir, "data")
        subprocess.run(self.as_user + [_bin("initdb"), "-D", data, "-U", "runner", "--auth=trust", "-E", "UTF8"],
                       check=True, capture_output=True, timeout=120)
        self.proc = subprocess.Popen(self.as_user + [_bin("postgres"), "-D", data, "-k", self.dir,
                                                     "-c", "listen_addresses=", "-c", "fsync=off",
                                                     "-c", "max_connections=200"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while subprocess.run([_bin("pg_isready"), "-h", self.dir, "-U", "runner"], capture_output=True).returncode:
            assert self.proc.poll() is None, "postgres exited at start"
            assert time.monotonic() < deadline, "postgres did not accept connections within 60 s"
            time.sleep(0.2)
        subprocess.run([_bin("createdb"), "-h", self.dir, "-U", "runner", "runner"], check=True, timeout=60)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            # fast shutdown (clients are disconnected), asked of the postmaster by pg_ctl: runuser does
            # not pass a SIGINT on, so the stop waited out its 60 s and killed runuser, postgres left running
            subprocess.run(self.as_user + [_bin("pg_ctl"), "-D", os.path.join(self.dir, "data"), "stop", "-m", "fast",
                                           "-w", "-t", "60"], capture_output=True, timeout=90)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
