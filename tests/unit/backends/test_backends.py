"""Each backend described once: its config (a `type` literal in one discriminated union) and its
Placement, which answers where things are. Engine-free: nothing here starts a sandbox."""
from __future__ import annotations

from pathlib import Path
from typing import Literal

import pytest
from pydantic import ValidationError

from executors.ssh import SSHConfig
from runner import backends
from runner.backends.base import BackendConfig, Placement, Setting
from runner.backends.docker import DockerBackend, DockerPlacement
from runner.backends.local import LocalBackend
from runner.backends.ssh import SSHBackend
from runner.errors import RunnerError
from runner.policy import Policy
from runner.policy.loader import PolicyError

SSH = {"host": "127.0.0.1", "user": "u", "key_file": "/k", "known_hosts": "/kh", "workdir": "/srv/ws"}


def setting(tmp_path, executor="docker", **policy) -> Setting:
    return Setting(tmp_path, Policy.model_validate({"sandbox": {"executor": executor}, **policy}), "s1")


def test_the_union_is_discriminated_on_type():
    assert backends.names() == ("docker", "local", "ssh", "swarm")
    assert isinstance(backends.parse({"type": "local"}), LocalBackend)
    assert backends.parse({"type": "docker", "egress_network": "out"}).egress_network == "out"
    ssh = backends.parse({"type": "ssh", "ssh": SSH})
    assert isinstance(ssh, SSHBackend) and ssh.ssh.workdir == "/srv/ws"
    with pytest.raises(ValidationError, match="does not match any of the expected tags"):
        backends.parse({"type": "k8s"})
    with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
        backends.parse({"type": "local", "egress_network": "out"})


def test_for_policy_takes_the_runner_keywords_each_backend_knows():
    assert backends.for_policy("docker", egress_network="out", ssh=None).egress_network == "out"
    assert backends.for_policy("local", egress_network="out") == LocalBackend()  # not one of its settings
    assert backends.for_policy("ssh", ssh=SSHConfig(**SSH)).ssh.host == "127.0.0.1"
    assert backends.for_policy("ssh", ssh=SSH).ssh.user == "u"  # a dict is validated
    with pytest.raises(RunnerError, match="executor ssh needs an SSH target"):
        backends.for_policy("ssh")
    with pytest.raises(RunnerError, match="needs ssh.workdir"):
        backends.for_policy("ssh", ssh={**SSH, "workdir": None})
    with pytest.raises(ValueError, match="a local backend config was given, but the policy's sandbox.executor is docker"):
        backends.for_policy("docker", LocalBackend())
    with pytest.raises(ValueError, match="unknown backend 'k8s'"):
        backends.for_policy("k8s")


def test_docker_placement_maps_the_workspace(tmp_path):
    p = DockerBackend().placement(setting(tmp_path))
    assert p.workspace == "/workspace" and p.tools_root == "/opt/runner-tools" and p.in_sandbox("a/b") == "/workspace/a/b"
    assert p.host_path("/workspace") == str(tmp_path)
    assert p.host_path("/workspace/x/y") == f"{tmp_path}/x/y"
    assert p.host_path("/workspacex/y") == "/workspacex/y" and p.host_path("rel/y") == "rel/y"
    assert p.sandbox_view(tmp_path / "tools") == "/workspace/tools"
    assert p.sandbox_view(Path("/opt/elsewhere")) is None  # shipped: mounted under tools_root
    assert not p.remote and p.isolated


def test_local_placement_is_where_things_are(tmp_path):
    p = LocalBackend().placement(setting(tmp_path, "local"))
    assert p.workspace == str(tmp_path) and p.tools_root is None
    assert p.host_path("/workspace/x") == "/workspace/x"
    assert p.sandbox_view(Path("/opt/elsewhere")) == "/opt/elsewhere"
    assert not p.isolated


def test_ssh_placement_is_the_hosts_workspace(tmp_path):
    p = SSHBackend(ssh=SSHConfig(**SSH)).placement(Setting(tmp_path, Policy(), "a/../b c"))
    assert p.workspace == "/srv/ws" and p.remote and p.in_sandbox("tools") == "/srv/ws/tools"
    assert p.tools_root == "/tmp/runner-tools-a____b_c"  # only safe characters from a caller's session id
    assert p.sandbox_view(tmp_path) is None  # nothing of this machine is there until copied
    assert p.ship([]) is None and p.shipped is None


def test_the_ssh_executor_says_loudly_that_it_is_no_sandbox(tmp_path):
    """The tools run on the SSH host as its user, with no container: the policy's network mode,
    limits, read-only workspace and protected directories (path checks only) are not held there by
    any kernel. The local executor said so on stderr before every command that runs tools; the ssh
    one said nothing, under the default policy's `network: none` as under any other."""
    from runner import Runner

    p = SSHBackend(ssh=SSHConfig(**SSH)).placement(setting(tmp_path, "ssh"))
    assert not p.isolated
    [w] = p.warnings()
    assert "executor ssh" in w and "u@127.0.0.1" in w and "NOT a sandbox" in w and "network" in w, w
    ro = SSHBackend(ssh=SSHConfig(**SSH)).placement(setting(tmp_path, "ssh", sandbox={"executor": "ssh",
                                                                                       "workspace": "ro"}))
    assert any("workspace ro" in x for x in ro.warnings()), ro.warnings()
    r = Runner(executor="ssh", ssh=SSHConfig(**SSH), workspace=tmp_path)
    try:
        assert any("NOT a sandbox" in x for x in r.warnings()), r.warnings()
    finally:
        r.close()


def test_a_registered_backend_is_a_policy_choice(tmp_path, monkeypatch):
    """Adding a backend: one config class (and its Placement), one register() line; the policy's
    sandbox.executor accepts it, and the Runner's session asks its Placement."""

    class FarPlacement(DockerPlacement):
        @property
        def workspace(self) -> str:
            return "/far/ws"

    class FarBackend(BackendConfig):
        type: Literal["far"] = "far"
        nodes: int = 1

        def placement(self, setting: Setting) -> Placement:
            return FarPlacement(self, setting)

    import sys
    import types

    mod = types.ModuleType("far_backend_for_test")
    mod.FarBackend = FarBackend
    monkeypatch.setitem(sys.modules, "far_backend_for_test", mod)
    monkeypatch.setitem(backends.BACKENDS, "far", "far_backend_for_test:FarBackend")
    assert Policy.model_validate({"sandbox": {"executor": "far"}}).sandbox.executor == "far"
    assert backends.parse({"type": "far", "nodes": 3}).nodes == 3
    from runner import Runner

    r = Runner(workspace=tmp_path, executor="far", backend={"nodes": 2})
    assert r.backend == FarBackend(nodes=2) and r.placement.workspace == "/far/ws"
    assert r.placement.in_sandbox(".git/hooks") == "/far/ws/.git/hooks"
    r.close()


def test_an_unknown_executor_is_refused_with_the_choices():
    with pytest.raises(PolicyError, match=r"sandbox\.executor: 'dokcer' is not allowed \(did you mean docker\?\); "
                                          r"use docker \| local \| ssh"):
        Policy().effective(environ={}, overrides={"sandbox.executor": "dokcer"})


def test_tool_folders_are_found_once_per_runner(tmp_path, monkeypatch):
    """The tool folders (a walk of packages' metadata and folders) are looked at once per Runner,
    not at every sandbox's creation; a refresh looks again."""
    from runner import Runner
    from runner.tools import custom

    calls = []
    real = custom.shipments
    monkeypatch.setattr(custom, "shipments", lambda s: calls.append(1) or real(s))
    r = Runner(workspace=tmp_path, executor="local")
    for _ in range(3):
        r.session.make_sandbox()
    assert len(calls) == 1
    r.session.forget_tool_folders()
    r.session.make_sandbox()
    assert len(calls) == 2
    r.close()


def test_an_operators_mount_is_looked_through_once_per_session(tmp_path, monkeypatch):
    """A policy mount of the operator's directory is scanned for sockets and devices (up to
    20,000 entries) once, not at every sandbox's creation; a socket there is still refused."""
    import socket

    from executors.docker import mounts
    from executors.errors import InvalidConfig

    data = tmp_path / "data"
    data.mkdir()
    ws = tmp_path / "ws"
    ws.mkdir()
    scans = []
    real = mounts._why_unsafe
    monkeypatch.setattr(mounts, "_why_unsafe", lambda path, scan: scans.append((str(path), scan)) or real(path, scan))
    pol = Policy.model_validate({"mounts": [{"source": str(data), "target": "/data"}]})
    p = DockerBackend().placement(Setting(ws, pol, "s1"))
    for _ in range(3):
        cfg = p.sandbox_config([], [])
        cfg.validate_mounts()  # what the executor does with it
    assert [s for s in scans if s == (str(data), True)] == [(str(data), True)]
    assert [m.scan for m in cfg.mounts if m.target == "/data"] == [False]
    with socket.socket(socket.AF_UNIX) as sock:  # a fresh session looks again, and refuses
        sock.bind(str(data / "s.sock"))
        with pytest.raises(InvalidConfig, match="socket"):
            DockerBackend().placement(Setting(ws, pol, "s2")).sandbox_config([], [])


def test_the_registry_is_the_package_listing_and_each_module_names_its_config():
    """One registry: every module of runner/backends but base and conformance is a backend, whose
    CONFIG's `type` is its module's name; the executors library holds no table of its own (its
    get_executor finds `executors.NAME`'s EXECUTOR)."""
    import executors

    assert backends.names() == ("docker", "local", "ssh", "swarm")
    for name in backends.names():
        assert backends.config_class(name).model_fields["type"].default == name
    assert not hasattr(executors, "BACKENDS")
    assert executors.shipped() == ("docker", "local", "ssh", "swarm")
    assert type(executors.get_executor("local", workdir="/tmp")).__name__ == "LocalExecutor"
    with pytest.raises(executors.InvalidConfig, match="unknown executor 'base': choose one of docker, local, ssh"):
        executors.get_executor("base")


def test_a_backend_module_dropped_in_the_package_is_registered_with_nothing_else_touched(monkeypatch):
    """Adding a backend is its module (and its executor's, and tests): no registry line to add."""
    import importlib
    import sys
    from pathlib import Path

    path = Path(backends.__file__).with_name("probefortest.py")
    path.write_text('from typing import Literal\nfrom .base import BackendConfig\n\n\n'
                    'class ProbeBackend(BackendConfig):\n    type: Literal["probefortest"] = "probefortest"\n\n\n'
                    'CONFIG = ProbeBackend\n')
    try:
        monkeypatch.setattr(backends, "BACKENDS", backends._listed())
        assert "probefortest" in backends.names()
        assert backends.parse({"type": "probefortest"}).type == "probefortest"
        assert Policy.model_validate({"sandbox": {"executor": "probefortest"}}).sandbox.executor == "probefortest"
    finally:
        path.unlink()
        sys.modules.pop("runner.backends.probefortest", None)
        importlib.invalidate_caches()
