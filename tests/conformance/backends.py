"""The backends the conformance battery runs against, each a context manager yielding
(executor, workspace path inside the sandbox). Add a backend here and it must pass every test."""
from __future__ import annotations

import contextlib
import os


@contextlib.contextmanager
def local(tmp_path):
    from executors.local import LocalExecutor

    with LocalExecutor(tmp_path) as ex:
        yield ex, str(tmp_path)


def _docker(lifecycle: str):
    @contextlib.contextmanager
    def make(tmp_path):
        from executors.docker import DockerExecutor, Mount

        os.chmod(tmp_path, 0o777)  # the sandbox user (1000) writes here
        ex = DockerExecutor(lifecycle=lifecycle, mounts=[Mount(source=str(tmp_path), target="/workspace")],
                            workdir="/workspace", labels={"runner.test": "conformance"})
        with ex:
            yield ex, "/workspace"

    return make


BACKENDS = {
    "local": local,
    "docker-session": _docker("per-session"),
    "docker-per-call": _docker("per-call"),
}
