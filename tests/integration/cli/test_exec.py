"""`runner exec` against the real engine: exit codes, streams, limits, clean-up, bad input."""
from __future__ import annotations

import io
import os
import select
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


def _in_pty(*args: str, timeout: float = 60) -> tuple[int, bytes]:
    """Run `runner ARGS` with a real pseudo-terminal as its stdin, stdout and stderr (its
    controlling terminal, as at a shell); its exit status and everything it wrote."""
    master, slave = os.openpty()
    proc = subprocess.Popen(runner_cmd(*args), stdin=slave, stdout=slave, stderr=slave, start_new_session=True)
    os.close(slave)
    out = b""
    try:
        while True:
            ready, _, _ = select.select([master], [], [], timeout)
            if not ready:
                raise AssertionError(f"no end in {timeout}s: {out!r}")
            try:
                data = os.read(master, 65536)
            except OSError:  # EIO: every holder of the terminal's other side is gone
                break
            if not data:
                break
            out += data
        return proc.wait(timeout=timeout), out
    finally:
        proc.kill()
        os.close(master)


def test_under_a_terminal_the_status_is_the_commands(no_leaks):
    """stdin a terminal: the thread copying it in was blocked in a BufferedReader's read when
    the command ended, and the interpreter's shutdown aborted (134, `Fatal Python error`)."""
    code, out = _in_pty("exec", "--", "sh", "-c", "echo hi; exit 5")
    assert code == 5 and b"hi" in out and b"Fatal" not in out, out


def test_an_open_pipe_on_stdin_does_not_hold_or_crash_the_exit(no_leaks):
    """`sleep 3 | runner exec -- echo hello`: the pipe still open when the command ends."""
    proc = subprocess.Popen(runner_cmd("exec", "--", "sh", "-c", "echo hello; exit 4"), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        code = proc.wait(timeout=60)
        out, err = proc.stdout.read(), proc.stderr.read()
    finally:
        proc.kill()
        proc.stdin.close()
    assert (code, out) == (4, b"hello\n") and b"Fatal" not in err, err


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
    (["--tmpfs", "/proc/sys", "--", "true"], "refusing a tmpfs over /proc/sys"),
    (["--tmpfs", "/dev/x", "--", "true"], "refusing a tmpfs over /dev/x"),
    (["--tmpfs", "/x:suid", "--", "true"], "bad --tmpfs option 'suid'"),
    (["--tmpfs", "/x:dev", "--", "true"], "bad --tmpfs option 'dev'"),
    (["--tmpfs", "x", "--", "true"], "bad --tmpfs"),
    (["--shm-size", "lots", "--", "true"], "bad --shm-size"),
    (["--gpus", "some", "--", "true"], "bad --gpus"),
    (["--stop-timeout", "-1", "--", "true"], "bad --stop-timeout"),
])
def test_bad_input_gets_one_clear_line(run_cli, args, says):
    """runner's own failures exit 125, as `docker run`'s, apart from the command's statuses."""
    p = run_cli("exec", *args)
    err = p.stderr.decode()
    assert p.returncode == 125, err
    assert says in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_an_engine_refusal_is_runners_failure_125(run_cli):
    too_many = (os.cpu_count() or 1) + 6
    p = run_cli("exec", "--cpus", str(too_many), "--", "true")
    err = p.stderr.decode()
    assert p.returncode == 125 and "CPUs" in err and len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("cmd, code, says", [
    (["nosuchcmd"], 127, "nosuchcmd: command not found"),
    (["/etc/passwd"], 126, "/etc/passwd: permission denied"),
])
def test_a_command_that_cannot_run_gets_runners_line_not_the_inits(run_cli, cmd, code, says):
    p = run_cli("exec", "--", *cmd)
    err = p.stderr.decode()
    assert p.returncode == code and says in err and "tini" not in err and len(err.strip().splitlines()) == 1, err


def test_a_command_that_prints_a_fatal_looking_line_keeps_it(run_cli):
    p = run_cli("exec", "--", "sh", "-c", "echo '[FATAL tini (1)] exec x failed: y' >&2; exit 3")
    assert (p.returncode, p.stderr) == (3, b"[FATAL tini (1)] exec x failed: y\n")


@pytest.mark.parametrize("pieces, code, shown, says", [
    # the init's line, as the engine may hand it on: in pieces
    ([b"[FATAL tini (2)] ", b"exec nosuchcmd failed: No such file or directory", b"\n"], 127, [],
     "nosuchcmd: command not found"),
    ([b"[FATAL tini (2)] exec x failed: Exec format error\n"], 126, [], "x: cannot run it (Exec format error)"),
    # the command's own output, passed on in order
    ([b"[FATAL tini (2)] exec x failed: y\n", b"more\n"], 0, [b"[FATAL tini (2)] exec x failed: y\n", b"more\n"], ""),
    ([b"[FAT", b"AL tini (2)] exec x failed: y\n"], 3, [b"[FATAL tini (2)] exec x failed: y\n"], ""),
    ([b"[F", b"oo\n"], 127, [b"[Foo\n"], ""),
    ([b"hello\n"], 127, [b"hello\n"], ""),
])
def test_the_start_gate_replaces_only_the_inits_line(monkeypatch, capsys, pieces, code, shown, says):
    from runner.cli import exec_cmd

    got = []
    monkeypatch.setattr(exec_cmd, "_on_output", lambda stream, data: got.append(data))
    gate = exec_cmd.StartGate("nosuchcmd" if any(b"nosuchcmd" in p for p in pieces) else "x")
    for p in pieces:
        gate.output("stderr", p)
    assert gate.close(code) == code
    assert [b"".join(got)] == [b"".join(shown)]
    assert says in capsys.readouterr().err


def test_the_start_gate_holds_little_and_not_for_long(monkeypatch):
    """Output that only begins as the init's line is passed on once it is longer than any."""
    from runner.cli import exec_cmd

    got = []
    monkeypatch.setattr(exec_cmd, "_on_output", lambda stream, data: got.append(data))
    gate = exec_cmd.StartGate("x")
    gate.output("stdout", b"[FATAL tini (")
    assert got == []
    gate.output("stdout", b"x" * 5000)
    assert b"".join(got) == b"[FATAL tini (" + b"x" * 5000  # before the end


def _started(proc, docker_client) -> bytes:
    """Wait for the command's first line ("ready") and its running container."""
    line = proc.stdout.readline()
    wait_for(lambda: [c for c in _owned_by(docker_client, proc.pid) if c["State"] == "running"])
    return line


def test_signals_are_passed_on_to_the_command(docker_client):
    script = ('for s in INT HUP QUIT USR1 USR2 WINCH; do trap "echo got $s" $s; done; '
              'trap "echo got TERM; exit 3" TERM; echo ready; while :; do sleep 0.1; done')
    proc = subprocess.Popen(runner_cmd("exec", "--", "sh", "-c", script), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert _started(proc, docker_client) == b"ready\n"
        for sig in (signal.SIGUSR1, signal.SIGUSR2, signal.SIGWINCH, signal.SIGQUIT, signal.SIGHUP, signal.SIGINT):
            proc.send_signal(sig)
            assert proc.stdout.readline() == f"got {sig.name[3:]}\n".encode()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert (proc.returncode, out) == (3, b"got TERM\n"), err
    assert _owned_by(docker_client, proc.pid) == []


def test_a_command_that_ignores_term_is_killed_after_the_stop_timeout(docker_client):
    proc = subprocess.Popen(runner_cmd("exec", "--stop-timeout", "1", "--", "sh", "-c",
                                       "trap '' TERM; echo ready; while :; do sleep 0.1; done"),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert _started(proc, docker_client) == b"ready\n"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 137 and b"out of memory" not in err, err
    assert _owned_by(docker_client, proc.pid) == []


@pytest.fixture(scope="module")
def entry_image(docker_client, busybox_image):
    """The busybox image with an ENTRYPOINT and a CMD of its own."""
    name = busybox_image.replace("busybox", "busybox-entry")
    dockerfile = f'FROM {busybox_image}\nENTRYPOINT ["echo", "entry"]\nCMD ["default", "args"]\n'
    docker_client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=name, rm=True,
                               labels={"runner.test": "busybox-entry"})
    yield name
    docker_client.images.remove(name, force=True)


@pytest.mark.parametrize("args, out", [
    ([], b"entry default args\n"),  # no command: the image's ENTRYPOINT and CMD
    (["--", "given"], b"entry given\n"),  # a command replaces CMD, ENTRYPOINT stays (as docker)
    (["--entrypoint", "sh", "--", "-c", "echo replaced"], b"replaced\n"),
    (["--entrypoint", "", "--", "echo", "plain"], b"plain\n"),  # "" clears it
])
def test_the_images_entrypoint_and_cmd(run_cli, entry_image, args, out):
    p = run_cli("exec", "--image", entry_image, *args)
    assert (p.returncode, p.stdout) == (0, out), p.stderr


def test_tmpfs_and_shm_size(run_cli):
    p = run_cli("exec", "--rm", "--tmpfs", "/scratch:size=8m,mode=1777", "--tmpfs", "/run/x", "--shm-size", "96m", "--",
                "sh", "-c", "grep -E ' /(scratch|run/x|dev/shm) ' /proc/mounts; echo hi > /scratch/f && cat /scratch/f")
    lines = p.stdout.decode().splitlines()
    scratch = next(x for x in lines if " /scratch " in x)
    assert "nosuid" in scratch and "nodev" in scratch and "noexec" in scratch and "size=8192k" in scratch, lines
    assert "size=65536k" in next(x for x in lines if " /run/x " in x), lines  # /tmp's size unless given
    assert "size=98304k" in next(x for x in lines if " /dev/shm " in x), lines
    assert p.returncode == 0 and lines[-1] == "hi", p.stderr


def test_gpus_without_a_gpu_runtime_say_so(run_cli):
    p = run_cli("exec", "--gpus", "all", "--", "true")
    err = p.stderr.decode()
    assert p.returncode == 125 and "no GPU runtime" in err and len(err.strip().splitlines()) == 1, err


def test_forcing_an_unsafe_mount_is_possible(run_cli):
    p = run_cli("exec", "--force-unsafe-mounts", "-v", "/:/host:ro", "--", "test", "-d", "/host/etc")
    assert p.returncode == 0, p.stderr


def test_no_engine_says_how_to_start_one(run_cli, tmp_path):
    p = run_cli("exec", "--", "true", env={"DOCKER_HOST": f"unix://{tmp_path}/none.sock"})
    err = p.stderr.decode()
    assert p.returncode == 69 and "no Docker engine" in err and "dockerd" in err and "Traceback" not in err
