"""Other clients of E2B's API, as their users would run them against runner serve: langchain-e2b's
deep-agents backend (the extra `e2b-clients`; its LangChain stack is not in runner's test venv by
default, so the test says it is skipped without it)."""
from __future__ import annotations

import pytest

langchain_e2b = pytest.importorskip("langchain_e2b", reason="langchain-e2b is not installed "
                                    "(pip install 'runner[e2b-clients]')")


def test_langchain_e2b_backend_executes_and_moves_files(as_tenant):
    from e2b import Sandbox

    sbx = Sandbox.create("base")
    try:
        backend = langchain_e2b.E2BSandbox(sandbox=sbx)
        res = backend.execute("echo hello")
        assert (res.output, res.exit_code) == ("hello\n", 0)
        assert backend.upload_files([("/home/user/x.txt", b"data")])[0].error is None
        assert backend.download_files(["/home/user/x.txt"])[0].content == b"data"
    finally:
        sbx.kill()
