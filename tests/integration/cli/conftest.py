import io
import os
import subprocess
import sys
import tarfile
import time

import pytest


def runner_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "runner", *args]


@pytest.fixture
def run_cli():
    def run(*args: str, input: bytes | None = None, env: dict | None = None, timeout: float = 120):
        return subprocess.run(runner_cmd(*args), input=input if input is not None else b"", capture_output=True,
                              timeout=timeout, env={**os.environ, **(env or {})})

    return run


@pytest.fixture(scope="session")
def busybox_image(docker_client):
    """An image with no python, no bash, no passwd entry for uid 1000: a static busybox only.
    Built from Debian's busybox-static, imported, removed after the session. The tag is this
    process's own, so concurrent runs never retag (and so orphan) each other's image."""
    tag = f"pid{os.getpid()}"
    name = f"runner-test/busybox:{tag}"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        tar.add("/bin/busybox", arcname="bin/busybox")
        for applet in ("sh", "echo", "cat", "sleep", "ps", "kill", "env", "id", "head", "true", "mkdir", "dirname", "chmod"):
            info = tarfile.TarInfo(f"bin/{applet}")
            info.type, info.linkname = tarfile.SYMTYPE, "busybox"
            tar.addfile(info)
        for d in ("tmp", "proc", "sys", "dev", "etc"):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if d == "tmp" else 0o755
            tar.addfile(info)
    docker_client.api.import_image_from_data(buf.getvalue(), repository="runner-test/busybox", tag=tag,
                                             changes=["ENV PATH=/bin", "LABEL runner.test=busybox"])
    yield name
    docker_client.images.remove(name, force=True)


def wait_for(predicate, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("condition not met in time")
