"""executors/docker/wire.py and oneshot.py: the frame decoder on real sockets, the create body
against docker-py's own (the hardening is one source: hardening.create_kwargs), the labelled
sweep against the real engine, and `runner exec` loading neither docker-py nor pydantic.
`runner exec`'s behaviour over this path is tests/integration/cli/test_exec.py's."""
from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import threading

import pytest

from executors.docker import labels as L
from executors.docker import runtimes
from executors.docker.wire import Frames, create_body
from runner.cli.exec_cmd import ExecOptions, build_config, plain_config


def frame(stream: int, payload: bytes) -> bytes:
    return struct.pack(">BxxxL", stream, len(payload)) + payload


def decoded(chunks: list[bytes], early: bytes = b"") -> list:
    """Send chunks one by one (each a separate write) and decode what arrives."""
    a, b = socket.socketpair()

    def send():
        for c in chunks:
            a.sendall(c)
        a.close()

    t = threading.Thread(target=send)
    t.start()
    frames, out = Frames(b, early), []
    while (item := frames.frame()) is not None:
        out.append(item)
    t.join()
    b.close()
    return out


def test_frames_in_order_with_streams_told_apart():
    data = frame(1, b"out\n") + frame(2, b"err\n") + frame(1, b"") + frame(1, b"x" * 200_000)
    assert decoded([data]) == [("stdout", b"out\n"), ("stderr", b"err\n"), ("stdout", b""), ("stdout", b"x" * 200_000)]


def test_frames_split_anywhere_even_inside_the_header():
    data = frame(2, b"hello") + frame(1, b"world")
    for cut in range(1, len(data)):
        assert decoded([data[:cut], data[cut:]]) == [("stderr", b"hello"), ("stdout", b"world")], cut
    assert decoded([bytes([b]) for b in data]) == [("stderr", b"hello"), ("stdout", b"world")]


def test_bytes_read_past_the_http_head_come_first():
    data = frame(1, b"first") + frame(2, b"second")
    assert decoded([data[11:]], early=data[:11]) == [("stdout", b"first"), ("stderr", b"second")]


def test_a_stream_cut_inside_a_frame_ends_without_the_partial_frame():
    assert decoded([frame(1, b"whole") + frame(2, b"cut short")[:10]]) == [("stdout", b"whole")]
    assert decoded([frame(1, b"ab")[:5]]) == []


def test_an_unknown_stream_id_counts_as_stdout():
    assert decoded([frame(0, b"stdin echo") + frame(3, b"sys")]) == [("stdout", b"stdin echo"), ("stdout", b"sys")]


def test_pending_says_whether_a_whole_frame_is_buffered():
    data = frame(1, b"abc")
    assert Frames(None, data).pending() and not Frames(None, data[:-1]).pending() and not Frames(None, b"").pending()


# -- one source for the hardening: the body equals docker-py's ------------------------------
def sdk_sent(cfg, argv: list[str], req=None, offered=()) -> dict:
    """What the DockerExecutor's per-call path sends docker-py to POST /containers/create (the
    JSON docker-py puts on the wire), with no engine: the request is caught at docker-py's _post.
    offered: the runtimes the engine's info lists (the executor's choice reads them)."""
    from unittest import mock

    import docker

    from executors.docker import DockerExecutor
    from executors.models import ExecRequest

    client = docker.DockerClient(base_url="unix:///nonexistent/runner-test.sock", version="1.41")
    sent = []

    class Caught(Exception):
        pass

    def post(url, data=None, **kw):
        sent.append((url, data))
        raise Caught

    client.api._post = post
    client.info = lambda: {"Runtimes": {name: {} for name in offered}}
    ex = DockerExecutor(cfg, client=client)
    with mock.patch.dict(runtimes._info, clear=True), pytest.raises(Caught):
        ex._spawn_container(req or ExecRequest(argv=argv))
    (url, data), = sent
    assert url.endswith("/containers/create")
    return json.loads(data)


def executor_wire_sent(cfg, req, offered=()) -> dict:
    """What the DockerExecutor's per-call path sends over wire.py (a local engine's) to POST
    /containers/create, caught before it reaches any engine. offered: as sdk_sent's."""
    from unittest import mock

    from executors.docker import DockerExecutor

    sent = []

    class Caught(Exception):
        pass

    class Engine:
        def json(self, method, path, body=None, timeout=None):
            if (method, path) == ("GET", "/info"):
                return {"Runtimes": {name: {} for name in offered}}
            sent.append((method, path, body))
            raise Caught

    ex = DockerExecutor(cfg)
    ex._wire = Engine()
    with mock.patch.dict(runtimes._info, clear=True), pytest.raises(Caught):
        ex._spawn_container(req)
    (method, path, body), = sent
    assert (method, path) == ("POST", "/containers/create")
    return json.loads(json.dumps(body))


def wire_sent(cfg, argv: list[str]) -> dict:
    from executors.docker.oneshot import body_for

    return json.loads(json.dumps(body_for(cfg, argv, "0" * 12)))


def comparable(body: dict) -> dict:
    """The body without what differs between two creations by design: the times and ids in labels."""
    labels = {k: v for k, v in body["Labels"].items() if k not in (L.CREATED, L.EXPIRES, L.EXECUTOR, L.SESSION)}
    assert set(body["Labels"]) >= {L.CREATED, L.EXPIRES, L.EXECUTOR, L.OWNER_PID, L.MANAGED}
    return {**body, "Labels": labels}


LOOSENINGS = [
    {},
    {"cap_add": ["CHOWN", "SETUID"], "read_only_root": False, "no_new_privileges": False, "seccomp_unconfined": True},
    {"init": False, "runtime": "runsc", "dns": ["127.0.0.1"], "network": "bridge"},
    {"limits": {"memory": "96m", "cpus": 0.5, "pids": 50, "tmpfs": "16m"}, "user": "1234:1234", "workdir": "/data",
     "env": {"A": "1", "B": "two words"}, "labels": {"runner.tenant": "t1"}},
    {"tmpfs": {"/scratch": "size=8m,exec"}, "shm_size": 96 * 2**20, "gpus": "device=0,1", "entrypoint": ["sh"],
     "publish": [("127.0.0.1", 8080, 80), ("0.0.0.0", 0, 81)], "network": "bridge"},
]


@pytest.mark.parametrize("fields", LOOSENINGS, ids=["hardened", "caps-and-root", "init-runtime-dns", "limits-env",
                                                    "exec-run-options"])
def test_the_wire_body_is_the_sdk_body(tmp_path, fields):
    from executors.docker import Mount, SandboxConfig

    (tmp_path / "ro").mkdir()
    (tmp_path / "rw").mkdir()
    cfg = SandboxConfig(**fields, lifecycle="per-call", mounts=[Mount(source=str(tmp_path / "ro"), target="/ro", read_only=True),
                                                                Mount(source=str(tmp_path / "rw"), target="/rw")])
    argv = ["sh", "-c", "echo hi"]
    sdk, wire = sdk_sent(cfg, argv), wire_sent(cfg, argv)
    assert comparable(wire) == comparable(sdk)
    assert sdk["HostConfig"]["CapDrop"] == ["ALL"] and sdk["HostConfig"]["LogConfig"]["Type"] == "none"
    # the executor's own two paths (docker-py where the engine is remote, wire.py where it is
    # local), with what a request adds: a directory, environment, a user, the agent as pid 1
    from executors.models import ExecRequest

    for req in (ExecRequest(argv=argv), ExecRequest(argv=argv, cwd="sub", env={"X": "1"}, user="2000:2000", own_init=True)):
        assert comparable(executor_wire_sent(cfg, req)) == comparable(sdk_sent(cfg, argv, req))
        # an engine that offers crun: both paths take it where the config names no runtime
        offered = ("runc", "crun", "runsc")
        body = executor_wire_sent(cfg, req, offered)
        assert comparable(body) == comparable(sdk_sent(cfg, argv, req, offered))
        assert body["HostConfig"]["Runtime"] == (cfg.runtime or "crun")


@pytest.mark.parametrize("opts", [
    {},
    {"memory": "96m", "cpus": 0.5, "pids": 50, "env": ["GREETING=hi there"], "workdir": "/w", "user": "1234:1234",
     "network": "bridge", "runtime": "runsc", "image": "busybox"},
    {"tmpfs": ["/scratch:size=8m", "/run/x"], "shm_size": "96m", "gpus": "all", "entrypoint": "", "network": "bridge",
     "publish": ["127.0.0.1:8080:80", "81:81/tcp"]},
], ids=["defaults", "options", "run-options"])
def test_exec_plain_config_makes_the_sandbox_config_body(tmp_path, opts):
    """`runner exec`'s stdlib config (plain_config) and its SandboxConfig (build_config, the SDK
    path's) give the same body: the defaults live once (hardening.DEFAULTS, defaults.py)."""
    (tmp_path / "m").mkdir()
    o = ExecOptions(cmd=["true"], mounts=[f"{tmp_path / 'm'}:/m:ro"], **opts)
    assert comparable(wire_sent(plain_config(o), o.cmd)) == comparable(wire_sent(build_config(o), o.cmd))
    assert comparable(wire_sent(plain_config(o), o.cmd)) == comparable(sdk_sent(build_config(o), o.cmd))


def test_a_host_config_argument_without_an_api_key_is_refused_not_dropped():
    with pytest.raises(ValueError, match="privileged"):
        create_body({"image": "x"}, {"privileged": True}, ["true"])


# -- against the real engine -------------------------------------------------------------------
@pytest.mark.docker
def test_an_interrupted_create_is_found_by_its_labels_and_removed(docker_client, no_leaks):
    """A create whose answer an interrupt cut off leaves a container only the labels know."""
    from executors.docker import oneshot
    from executors.docker.wire import Engine, socket_path

    cfg = plain_config(ExecOptions(cmd=["true"]))
    cfg.labels = {"runner.test": "wire"}
    body = oneshot.body_for(cfg, ["sleep", "60"], "abcdef012345")
    engine = Engine(socket_path())
    mine = engine.json("POST", "/containers/create", body)["Id"]
    other = engine.json("POST", "/containers/create", oneshot.body_for(cfg, ["true"], "fedcba543210"))["Id"]
    try:
        oneshot._remove(engine, None, "abcdef012345")
        left = {c["Id"] for c in docker_client.api.containers(all=True, filters={"label": "runner.test=wire"})}
        assert mine not in left and other in left
    finally:
        docker_client.api.remove_container(other, force=True)


SDK_MODULES = ("docker", "requests", "urllib3", "paramiko")  # docker-py and what it brings


def loaded(code: str, modules: tuple) -> subprocess.CompletedProcess:
    """code run by a fresh interpreter on the local engine; the last line of its stderr lists which
    of modules it had loaded at its exit."""
    listed = ("import atexit, sys\n"
              f"atexit.register(lambda: print(sorted(m for m in {modules!r} if m in sys.modules), file=sys.stderr))\n")
    return subprocess.run([sys.executable, "-c", listed + code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "DOCKER_HOST": ""})


@pytest.mark.docker
def test_runner_exec_loads_neither_docker_py_nor_pydantic(no_leaks):
    p = loaded("import runpy, sys\n"
               "sys.argv = ['runner', 'exec', '--', 'sh', '-c', 'echo ran']\n"
               "runpy.run_module('runner', run_name='__main__')\n",
               ("docker", "pydantic", "requests", "urllib3", "paramiko", "http.client", "ssl"))
    assert p.returncode == 0 and p.stdout == "ran\n", p.stderr
    assert p.stderr.strip().splitlines()[-1] == "[]"


@pytest.mark.docker
def test_a_call_in_a_sandbox_of_the_local_engine_loads_no_docker_py(tmp_path, no_leaks):
    """`runner call` on the local engine: the sandbox's create, attach, start and removal, and the
    channel's look at the engine, all go over wire.py (docker-py's import was ~0.3 s of it)."""
    p = loaded("import runpy, sys\n"
               f"sys.argv = ['runner', 'call', '--executor', 'docker', '-w', {str(tmp_path)!r}, 'bash',"
               " '{\"command\": \"echo ran\"}']\n"
               "runpy.run_module('runner', run_name='__main__')\n", SDK_MODULES)
    assert p.returncode == 0 and json.loads(p.stdout)["content"] == "ran\n", p.stderr
    assert p.stderr.strip().splitlines()[-1] == "[]"


@pytest.mark.docker
def test_a_per_call_runner_on_the_local_engine_loads_no_docker_py(tmp_path, no_leaks):
    """A fresh sandbox per call: the engine's check the CLI makes before the first call
    (toolcli.require_engine) goes over wire.py too."""
    p = loaded("from runner import Runner\n"
               "from runner.cli.toolcalls import require_engine\n"
               f"with Runner(executor='docker', workspace={str(tmp_path)!r}, preset='all', lifecycle='per-call') as r:\n"
               "    require_engine(r)\n"
               "    print(r.call('bash', {'command': 'echo ran'}).content, end='')\n", SDK_MODULES)
    assert p.returncode == 0 and p.stdout == "ran\n", p.stderr
    assert p.stderr.strip().splitlines()[-1] == "[]"


@pytest.mark.docker
def test_an_unknown_user_is_the_same_start_failure_on_both_paths(no_leaks):
    """The config's user, named in the message (the SDK path said `user None`), exit 126."""
    from executors.docker import DockerExecutor

    with DockerExecutor(lifecycle="per-call", user="nobodyx", labels={"runner.test": "wire"}) as ex:
        res = ex.run(["true"])
    p = subprocess.run([sys.executable, "-m", "runner", "exec", "--user", "nobodyx", "--", "true"], capture_output=True,
                       timeout=120, stdin=subprocess.DEVNULL)
    assert (res.exit_code, p.returncode) == (126, 126)
    assert res.stderr.decode().strip() == p.stderr.decode().strip()
    assert "user nobodyx: no such user" in p.stderr.decode()


def test_an_engine_that_hangs_up_on_a_wait_is_the_sandbox_gone(tmp_path):
    """A per-call container's wait over wire.py, the engine's connection dropped (killed, crashed):
    SandboxGone, as the SDK path says, not the transport's ConnectionError."""
    import time

    from executors.docker.process import EngineContainerProcess
    from executors.docker.wire import Engine
    from executors.errors import SandboxGone

    path = str(tmp_path / "engine.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen(8)
    asked = []

    def serve():  # the first request (the wait) hung up on; the rest (close's) answered 404
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            with c:
                asked.append(c.recv(65536).split(b" ", 2)[:2])
                if len(asked) > 1:
                    c.sendall(b'HTTP/1.1 404 Not Found\r\nContent-Length: 15\r\n\r\n{"message":"x"}')

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    ours, theirs = socket.socketpair()
    proc = EngineContainerProcess(Engine(path), "c" * 64, ours, b"", time.time())
    try:
        with pytest.raises(SandboxGone, match="stopped answering"):
            proc.wait()
    finally:
        theirs.close()
        proc.close()
        srv.shutdown(socket.SHUT_RDWR)  # (wakes the accept)
        srv.close()
        t.join(timeout=5)
    assert asked[0] == [b"POST", b"/containers/" + b"c" * 64 + b"/wait"]
    assert [b"DELETE", b"/containers/" + b"c" * 64 + b"?force=1"] in asked


@pytest.mark.docker
def test_an_interrupt_while_the_process_is_made_leaves_no_container(monkeypatch, docker_client, no_leaks):
    """Started, then interrupted before the caller holds its process: the container goes at once,
    not at the executor's stop()."""
    from executors.docker import DockerExecutor, process
    from executors.models import ExecRequest

    def interrupted(self, *a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(process.EngineContainerProcess, "__init__", interrupted)
    ex = DockerExecutor(lifecycle="per-call", labels={"runner.test": "wire"})
    try:
        with pytest.raises(KeyboardInterrupt):
            ex.spawn(ExecRequest(argv=["sleep", "30"]))
        assert docker_client.api.containers(all=True, filters={"label": f"{L.EXECUTOR}={ex.instance}"}) == []
    finally:
        ex.stop()
