import pytest

from .sshd import make_sshd


@pytest.fixture
def sshd(tmp_path):
    server = make_sshd(tmp_path / "sshd").start()
    yield server
    server.stop()


@pytest.fixture
def ssh_config(sshd):
    from executors.ssh import SSHConfig

    return SSHConfig(host="127.0.0.1", port=sshd.port, user="root", key_file=sshd.client_key,
                     known_hosts=sshd.known_hosts, connect_attempts=2, keepalive=1)
