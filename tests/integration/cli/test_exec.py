"""`runner exec` against the real engine: exit codes, streams, limits, clean-up, bad input."""
from __future__ import annotations

import os
import signal
import subprocess

import pytest

from .conftest import runner_cmd, wait_for

pytestmark = pytest.mark.usefixtures("no_leaks")


def test_exit_status_and_separate_streams(run_cli):
    p = run_cli("exec", "--", "sh", "-c", "echo out; echo err >&2; exit 7")
    assert (p.returncode, p.stdout, p.stderr) == (7, b"out\n", b"err\n")


def test_everything_after_the_options_is_the_commands(run_cli):
    p = run_cli("exec", "-e", "A=1", "sh", "-c", 'echo "$A" "$@"', "x", "--image", "-e", "--", "-h")
    assert (p.returncode, p.stdout) == (0, b"1 --image -e -- -h\n"), p.stderr
    p = run_cli("exec", "--", "echo", "--", "--help")  # the first -- ends the options, the rest is CMD's
    assert (p.returncode, p.stdout) == (0, b"-- --help\n"), p.stderr


def test_stdin_passes_through(run_cli):
    data = os.urandom(200_000)
    p = run_cli("exec", "--", "cat", input=data)
    assert p.returncode == 0 and p.stdout == data


def test_defaults_are_hardened(run_cli):
    p = run_cli("exec", "--", "sh", "-c", "id -u; grep -E 'CapEff|NoNewPrivs' /proc/self/status; touch /x")
    out = p.stdout.decode()
    assert out.startswith("1000\n") and "0000000000000000" in out and "NoNewPrivs:\t1" in out
    assert b"Read-only file system" in p.stderr and p.returncode == 1


def test_options_reach_the_container(run_cli, tmp_path):
    (tmp_path / "in.txt").write_text("mounted")
    tmp_path.chmod(0o755)
    p = run_cli("exec", "--memory", "96m", "--pids", "50", "--cpus", "0.5", "-v", f"{tmp_path}:/data:ro",
                "-e", "GREETING=hi there", "-w", "/data", "--user", "1234:1234", "--",
                "sh", "-c", "cat in.txt; echo; echo $GREETING; id -u; pwd; cat /sys/fs/cgroup/pids/pids.max; touch x")
    assert p.stdout.decode().splitlines() == ["mounted", "hi there", "1234", "/data", "50"]
    assert b"Read-only file system" in p.stderr


def test_timeout_kills_the_tree_exits_124_with_one_line(run_cli):
    p = run_cli("exec", "--timeout", "1", "--", "sh", "-c", "sleep 100 & sleep 100; echo never")
    assert p.returncode == 124
    assert p.stdout == b""
    assert len(p.stderr.decode().splitlines()) == 1 and "timed out after 1s" in p.stderr.decode()


def test_memory_kill_exits_137_and_says_out_of_memory(run_cli):
    p = run_cli("exec", "--memory", "64m", "--", "python3", "-c", "x = bytearray(400 * 2**20)")
    assert p.returncode == 137
    assert "out of memory" in p.stderr.decode() and "64m" in p.stderr.decode()


def test_a_kill_that_is_not_oom_is_not_called_oom(run_cli):
    p = run_cli("exec", "--", "sh", "-c", "kill -9 $$")
    assert p.returncode == 137 and b"out of memory" not in p.stderr


def test_image_without_python_or_bash(run_cli, busybox_image):
    p = run_cli("exec", "--image", busybox_image, "--", "sh", "-c", "echo hi; id -u; exit 3")
    assert (p.returncode, p.stdout) == (3, b"hi\n1000\n")
    p = run_cli("exec", "--image", busybox_image, "--timeout", "1", "--", "sh", "-c", "sleep 50")
    assert p.returncode == 124


def _owned_by(docker_client, pid: int):
    return docker_client.api.containers(all=True, filters={"label": f"runner.owner.pid={pid}"})


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_interrupt_removes_the_container(docker_client, sig, code):
    proc = subprocess.Popen(runner_cmd("exec", "--", "sleep", "100"), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: [c for c in _owned_by(docker_client, proc.pid) if c["State"] == "running"])
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == code, err
    assert b"Traceback" not in err
    assert _owned_by(docker_client, proc.pid) == []


@pytest.mark.parametrize("args, says", [
    (["--image", "no-such/image:1", "--", "true"], "not on this engine"),
    (["--image", "runner/nope", "--", "true"], "runner images build"),
    (["--memory", "12q", "--", "true"], "bad --memory"),
    (["--memory=-5m", "--", "true"], "bad --memory"),
    (["--memory", "-5m", "--", "true"], "argument --memory: expected one argument"),  # -5m reads as an option
    (["--pids", "many", "--", "true"], "argument --pids: invalid int value: 'many'"),
    (["--bogus", "--", "true"], "unrecognized arguments: --bogus"),
    (["--pids", "0", "--", "true"], "bad --pids"),
    (["--timeout", "-1", "--", "true"], "bad --timeout"),
    (["--network", "host", "--", "true"], "bad --network"),
    (["-v", "/definitely/not/here:/x", "--", "true"], "does not exist"),
    (["-v", "/var/run/docker.sock:/s", "--", "true"], "socket"),
    (["-v", "/run:/r", "--", "true"], "socket"),
    (["-v", "/:/host", "--", "true"], "root"),
    (["-v", "nodst", "--", "true"], "bad mount"),
    (["-e", "1BAD=x", "--", "true"], "bad --env"),
    ([], "no command given"),
])
def test_bad_input_gets_one_clear_line(run_cli, args, says):
    p = run_cli("exec", *args)
    err = p.stderr.decode()
    assert p.returncode != 0
    assert says in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_forcing_an_unsafe_mount_is_possible(run_cli):
    p = run_cli("exec", "--force-unsafe-mounts", "-v", "/:/host:ro", "--", "test", "-d", "/host/etc")
    assert p.returncode == 0, p.stderr


def test_no_engine_says_how_to_start_one(run_cli, tmp_path):
    p = run_cli("exec", "--", "true", env={"DOCKER_HOST": f"unix://{tmp_path}/none.sock"})
    err = p.stderr.decode()
    assert p.returncode == 69 and "no Docker engine" in err and "dockerd" in err and "Traceback" not in err
