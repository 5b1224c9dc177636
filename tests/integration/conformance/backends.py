"""The backends the conformance battery (executors/conformance.py) runs against, each a context
manager yielding (executor, workspace path inside the sandbox, conformance.Traits). Add a backend
here and it must pass every check."""
from __future__ import annotations

import contextlib
import os

from executors.conformance import Traits


@contextlib.contextmanager
def local(tmp_path):
    from executors.local import LocalExecutor

    with LocalExecutor(tmp_path) as ex:
        yield ex, str(tmp_path), Traits()


def _docker(lifecycle: str, sdk: bool = False, runtime: str | None = None):
    """sdk: per-call containers through docker-py (a tcp:// or ssh:// engine's path, or a given
    client's), where on the local engine they go over wire.py. runtime: the config's (None: the
    executor's own choice, crun where the engine offers it: executors/docker/runtimes.py)."""
    @contextlib.contextmanager
    def make(tmp_path):
        from executors.docker import DockerExecutor, Mount
        from executors.docker.engine import connect

        os.chmod(tmp_path, 0o777)  # the sandbox user (1000) writes here
        client = connect() if sdk else None
        ex = DockerExecutor(lifecycle=lifecycle, mounts=[Mount(source=str(tmp_path), target="/workspace")],
                            workdir="/workspace", labels={"runner.test": "conformance"}, client=client,
                            runtime=runtime)
        if lifecycle == "per-call":  # the path this backend is here to check
            assert (ex.wire_engine() is None) == sdk
        try:
            with ex:
                yield ex, "/workspace", Traits(switches_users=True, creates_missing_cwd=lifecycle == "per-call")
        finally:
            if client is not None:
                client.close()

    return make


@contextlib.contextmanager
def ssh(tmp_path):
    """A real sshd on a loopback port; the remote workspace is a directory on this machine."""
    from executors.ssh import SSHExecutor

    from ..ssh.sshd import make_sshd

    server = make_sshd(tmp_path / "sshd").start()
    ws = tmp_path / "remote"
    ws.mkdir()
    try:
        with SSHExecutor(host="127.0.0.1", port=server.port, user="root", key_file=server.client_key,
                         known_hosts=server.known_hosts, workdir=str(ws)) as ex:
            yield ex, str(ws), Traits()
    finally:
        server.stop()


def swarm(tmp_path, cluster):
    """A service on the two-node swarm of tests/integration/swarm (either node; the workspace is a bind
    mount, which both nodes see: they are one machine)."""
    from executors.docker import Mount
    from executors.swarm import SwarmExecutor

    @contextlib.contextmanager
    def make():
        os.chmod(tmp_path, 0o777)
        ex = SwarmExecutor(engines=cluster.engines(), mounts=[Mount(source=str(tmp_path), target="/workspace")],
                           workdir="/workspace", labels={"runner.test": "conformance"})
        with ex:  # commands by `docker exec` into the service's container, as docker per-session
            yield ex, "/workspace", Traits(switches_users=True)

    return make()


NEEDS_CLUSTER = {"swarm": swarm}

BACKENDS = {
    "local": local,
    "docker-session": _docker("per-session"),
    "docker-per-call": _docker("per-call"),
    "docker-per-call-sdk": _docker("per-call", sdk=True),
    # runc named, where the three above get crun when the engine offers it (as set-up makes it)
    "docker-session-runc": _docker("per-session", runtime="runc"),
    "docker-per-call-runc": _docker("per-call", runtime="runc"),
    "ssh": ssh,
    **NEEDS_CLUSTER,
}
