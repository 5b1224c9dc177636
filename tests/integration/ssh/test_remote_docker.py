"""Docker on a remote host over SSH: `runner exec --host ssh://...` and DockerExecutor with an
ssh:// engine address, against a real sshd (on loopback) in front of this machine's engine."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.usefixtures("no_leaks")


@pytest.fixture
def ssh_home(sshd, tmp_path):
    """A HOME whose ~/.ssh names the key and trusts the host key: what docker-py's ssh transport
    reads (it rejects unknown host keys)."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "config").write_text(f"Host 127.0.0.1\n  Port {sshd.port}\n  User root\n"
                                          f"  IdentityFile {sshd.client_key}\n")
    (home / ".ssh" / "known_hosts").write_text(open(sshd.known_hosts).read())
    return home


def test_runner_exec_against_an_engine_over_ssh(sshd, ssh_home):
    env = {**os.environ, "HOME": str(ssh_home)}
    env.pop("DOCKER_HOST", None)
    p = subprocess.run([sys.executable, "-m", "runner", "exec", "--host", f"ssh://root@127.0.0.1:{sshd.port}", "--",
                        "sh", "-c", "echo remote; id -u; exit 3"], capture_output=True, env=env, timeout=120)
    assert (p.returncode, p.stdout) == (3, b"remote\n1000\n"), p.stderr
    p = subprocess.run([sys.executable, "-m", "runner", "exec", "--host", f"ssh://root@127.0.0.1:{sshd.port}",
                        "--image", "no/such:image", "--", "true"], capture_output=True, env=env, timeout=120)
    assert p.returncode == 125 and b"not on this engine" in p.stderr  # runner's own failure, as docker run's


def test_unknown_host_key_is_refused(sshd, ssh_home):
    (ssh_home / ".ssh" / "known_hosts").write_text("")
    env = {**os.environ, "HOME": str(ssh_home)}
    p = subprocess.run([sys.executable, "-m", "runner", "exec", "--host", f"ssh://root@127.0.0.1:{sshd.port}", "--",
                        "true"], capture_output=True, env=env, timeout=120)
    assert p.returncode == 69 and b"no Docker engine answers" in p.stderr and b"Traceback" not in p.stderr
