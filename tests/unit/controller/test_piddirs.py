"""Directories named for their controller's process (runner/controller/piddirs.py): a directory is its
maker's while that very process lives, not while some process holds its pid."""
from __future__ import annotations

import os
import subprocess

from executors.posix import process_start_time
from runner.controller import piddirs


def test_a_made_directory_names_its_process_and_when_it_started(tmp_path):
    made = piddirs.make("x-", str(tmp_path))
    owner = os.path.basename(made)[len("x-"):].split("-", 1)[0]
    assert owner == f"{os.getpid()}.{process_start_time(os.getpid())}"
    assert piddirs.sweep(str(tmp_path), "x-") == [] and os.path.isdir(made)


def test_a_reused_pid_keeps_no_dead_controllers_directory(tmp_path):
    """The kernel gives a dead controller's pid to the next process: a directory whose name
    carries another start time than the live process by that pid is a dead one's, and goes."""
    live = subprocess.Popen(["sleep", "60"])
    try:
        start = process_start_time(live.pid)
        reused = tmp_path / f"x-{live.pid}.{int(start) - 1}-abc"  # that pid, an earlier process
        reused.mkdir()
        same = tmp_path / f"x-{live.pid}.{start}-abc"
        same.mkdir()
        bare = tmp_path / f"x-{live.pid}-abc"  # a name from before the start time was in it
        bare.mkdir()
        assert piddirs.sweep(str(tmp_path), "x-") == [(str(reused), f"its controller (pid {live.pid}) is gone")]
        assert not reused.exists() and same.is_dir() and bare.is_dir()
    finally:
        live.kill()
        live.wait()
    # its process gone, both names go
    assert sorted(p for p, _ in piddirs.sweep(str(tmp_path), "x-")) == sorted([str(bare), str(same)])


def test_a_malformed_owner_is_left_alone(tmp_path):
    for name in ("x-.123-a", "x-abc.1-a", f"x-{os.getpid()}.-a", f"x-{os.getpid()}.1e3-a"):
        (tmp_path / name).mkdir()
    assert piddirs.sweep(str(tmp_path), "x-") == []


def test_without_a_start_time_the_name_has_the_pid_alone(tmp_path, monkeypatch):
    """Where /proc cannot tell the start time, the name still parses (and is swept by its pid)."""
    monkeypatch.setattr(piddirs, "process_start_time", lambda pid: None)
    made = piddirs.make("x-", str(tmp_path))
    assert os.path.basename(made).startswith(f"x-{os.getpid()}-")
