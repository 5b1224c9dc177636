"""read and edit (runner/agent/files.py) on what is not a regular file."""
from __future__ import annotations

import os
import stat
import threading

import pytest

from runner.agent import files
from runner.agent.context import Ctx, ToolError


@pytest.mark.parametrize("tool", ["read", "edit"])
def test_read_and_edit_refuse_a_fifo_without_opening_it(tmp_path, tool):
    """A fifo in the workspace is an answer at once: opening it would wait for a writer until the
    call's timeout (60 s of make test), and an edit whose writer came replaced the fifo by a file."""
    fifo = tmp_path / "x"
    os.mkfifo(fifo)

    def writer():  # a process of the sandbox feeding the fifo to whoever opens it
        with open(fifo, "wb") as w:
            w.write(b"a\n")

    t = threading.Thread(target=writer, daemon=True)
    t.start()
    args = {"path": "x"} if tool == "read" else {"path": "x", "old_string": "a", "new_string": "b"}
    try:
        with pytest.raises(ToolError, match="not a regular file"):
            getattr(files, tool)(Ctx({"workspace": str(tmp_path)}), args)
    finally:
        fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # lets the writer's open return if nothing opened it
        t.join()
        os.close(fd)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
