"""A Runner on an SSH host has the file operations of the Python API (put_file, get_file,
list_files) with the same built-in errors: done on the host, through the executor."""
from __future__ import annotations

import pytest

from runner import Runner
from runner.errors import RunnerError


def test_file_operations_on_the_ssh_host(ssh_config, tmp_path):
    ws = tmp_path / "remote-ws"
    ws.mkdir()
    cfg = ssh_config.model_copy(update={"workdir": str(ws)})
    with Runner(executor="ssh", workspace=ws, ssh=cfg, protect=["locked"]) as r:
        assert r.placement.remote  # the executor's way, not this machine's
        r.put_file("d/a.bin", b"\x00\xff")
        assert (ws / "d" / "a.bin").read_bytes() == b"\x00\xff"
        assert r.get_file("d/a.bin") == b"\x00\xff"
        (ws / "d" / "sub").mkdir()
        (ws / "d" / "link").symlink_to("a.bin")
        assert r.list_files("d") == ["a.bin", "link", "sub/"]
        with pytest.raises(FileNotFoundError):
            r.get_file("d/nope")
        with pytest.raises(FileNotFoundError):
            r.list_files("nope")
        with pytest.raises(IsADirectoryError):
            r.get_file("d/sub")
        with pytest.raises(NotADirectoryError):
            r.list_files("d/a.bin")
        with pytest.raises(PermissionError):
            r.put_file("locked/x", b"no")
        with pytest.raises(RunnerError):
            r.get_file("../x")
