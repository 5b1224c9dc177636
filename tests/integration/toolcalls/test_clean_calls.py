"""Every bash/exec call starts clean, even though the agent keeps a shell ready before the call
arrives (agent/procs.py's spare): nothing one call does to its shell is seen by the next.
Run on local and docker alike."""
from __future__ import annotations

import time


def ok(res):
    assert not res.is_error, res.text
    return res.text


def sh(call, command: str, **kw) -> str:
    return ok(call("bash", {"command": command, **kw}))


def test_an_exported_variable_is_not_seen_by_the_next_call(call):
    assert sh(call, "export RUNNER_T=one; RUNNER_U=two; echo \"$RUNNER_T $RUNNER_U\"") == "one two\n"
    assert sh(call, 'echo "[${RUNNER_T-unset}] [${RUNNER_U-unset}]"') == "[unset] [unset]\n"


def test_a_cd_is_not_seen_by_the_next_call(call):
    home = sh(call, "pwd")
    assert sh(call, "cd /tmp && pwd") == "/tmp\n"
    assert sh(call, "pwd") == home
    assert sh(call, 'echo "[${OLDPWD-unset}]"') == sh(call, 'echo "[${OLDPWD-unset}]"')


def test_a_umask_is_not_seen_by_the_next_call(call):
    before = sh(call, "umask")
    changed = "0077\n" if before != "0077\n" else "0027\n"
    assert sh(call, f"umask {changed.strip()}; umask") == changed
    assert sh(call, "umask") == before


def test_a_background_job_is_not_seen_by_the_next_call(call):
    pid = sh(call, "sleep 30 >/dev/null 2>&1 & echo $!").strip()
    try:
        assert sh(call, 'jobs -p | wc -l; echo "[${!-none}]"').split() == ["0", "[none]"]
        assert sh(call, f"kill -0 {pid} && echo alive") == "alive\n"  # it runs on, only not as this shell's job
    finally:
        call("bash", {"command": f"kill {pid}"})


def test_shell_state_is_not_seen_by_the_next_call(call):
    before = sh(call, "ulimit -n; set -o | grep -E '^(noclobber|errexit) '; shopt nullglob; true")
    sh(call, "f() { echo f; }; alias a=echo; set -o noclobber -o errexit; shopt -s nullglob; X=1; "
             "trap 'true' USR1; ulimit -n 64; cd /; echo ok")
    after = sh(call, "type f >/dev/null 2>&1 && echo function; alias; echo \"[${X-}]\"; trap -p")
    assert after == "[]\n"
    assert sh(call, "ulimit -n; set -o | grep -E '^(noclobber|errexit) '; shopt nullglob; true") == before


def test_each_call_is_a_new_process_with_no_extra_descriptors_or_variables(call):
    pids = {sh(call, "echo $$").strip() for _ in range(3)}
    assert len(pids) == 3
    # A simple command, no pipeline: the shell holds no pipe of its own while ls looks.
    fds = sh(call, "ls /proc/$$/fd; readlink /proc/$$/fd/0; [ -z \"${__runner_cmd+x}\" ] && echo no-helper-variable")
    assert fds.splitlines() == ["0", "1", "2", "/dev/null", "no-helper-variable"]
    assert sh(call, "cat; echo read-nothing") == "read-nothing\n"  # stdin is /dev/null, not a pipe


def test_a_killed_spare_shell_costs_the_next_call_nothing(call):
    """The shell kept ready for the next call is a process like any other in the sandbox: a job
    that kills it makes the next call start its own."""
    sh(call, "(sleep 0.5; pkill -KILL -P $PPID -f __runner_cmd) >/dev/null 2>&1 &")
    time.sleep(1.5)
    assert sh(call, "echo still; exit 0") == "still\n"
    assert sh(call, "echo and again") == "and again\n"


def test_a_command_with_a_nul_is_refused_either_way(call):
    res = call("bash", {"command": "echo a\0b"})
    assert res.is_error and "NUL" in res.text
    res = call("exec", {"command": "echo a\0b", "input": "x"})
    assert res.is_error and "NUL" in res.text
    assert sh(call, "echo fine") == "fine\n"


def test_a_syntax_error_and_exit_codes_are_those_of_bash_c(call):
    res = call("bash", {"command": "if"})
    assert res.is_error and "syntax error" in res.text and res.meta["exit_code"] == 2
    res = call("bash", {"command": "echo partial; exit 7"})
    assert res.is_error and res.meta["exit_code"] == 7 and res.text.startswith("partial\n")
    res = call("bash", {"command": "echo $LINENO\necho $LINENO"})
    assert res.text == "1\n2\n"


def test_cwd_and_input_start_their_own_shell(call, workspace):
    (workspace / "sub").mkdir()
    assert sh(call, "pwd", cwd="sub").endswith("/sub\n")
    assert ok(call("exec", {"command": "cat", "input": "fed\n"})) == "fed\n"
    assert not sh(call, "pwd").endswith("/sub\n")


def test_output_streams_while_the_command_runs_and_the_last_piece_comes_with_the_result(runner):
    """The agent holds a call's output only while more follows at once: what a command prints
    before it goes quiet is streamed on its own, and only the last piece rides with the result."""
    sandbox = runner.session.acquire()
    events: list[tuple[str, str]] = []
    msg = sandbox.call("s1", "bash", {"command": "echo first; sleep 2; echo second"}, 60,
                       on_output=lambda text: events.append(("output", text)))
    assert events == [("output", "first\n"), ("output", "second\n")]
    assert msg["op"] == "result" and msg["meta"]["exit_code"] == 0


def test_a_calls_last_output_rides_in_its_result_and_in_no_other_message():
    """The agent's end of the channel: output held for a call's result goes in that result (one
    line for the controller to open), and before anything else, on its own, so none is lost."""
    import io
    import os

    from runner.agent import server, wire

    key = os.urandom(32)
    r, w = os.pipe()
    agent = server.Wire(io.BytesIO(b""), w)
    agent.keyed(key.hex())
    reader = wire.Verifier(wire.direction_key(key, wire.FROM_AGENT))

    def lines() -> list[dict]:
        return [reader.open(line) for line in os.read(r, 1 << 16).splitlines()]

    agent.hold({"op": "output", "id": "c1", "data": "last\n"})
    agent.send({"op": "result", "id": "c1", "content": "", "meta": {}})
    assert lines() == [{"op": "result", "id": "c1", "content": "", "meta": {}, "output": "last\n"}]
    agent.hold({"op": "output", "id": "c2", "data": "other\n"})
    agent.send({"op": "result", "id": "c3", "content": "x", "meta": {}})
    assert lines() == [{"op": "output", "id": "c2", "data": "other\n"},
                       {"op": "result", "id": "c3", "content": "x", "meta": {}}]
    os.close(r)


def test_a_workspace_replaced_by_a_link_is_not_the_next_calls_directory(tmp_path):
    """A call with no cwd starts in the workspace the hello resolved, checked by one stat of its
    identity (procs._cwd): a workspace a call moved away and replaced by a link to another
    directory is refused as outside, as the full resolve refuses it, never run in. The local
    executor (a docker workspace is a mount, which cannot be moved)."""
    from runner import Runner

    ws, elsewhere = tmp_path / "ws", tmp_path / "elsewhere"
    ws.mkdir()
    elsewhere.mkdir()
    with Runner(executor="local", workspace=ws, pool_size=0) as r:
        assert r.call("bash", {"command": "pwd"}).text.strip() == str(ws)
        moved = r.call("bash", {"command": f"mv {ws} {tmp_path}/ws.old && ln -s {elsewhere} {ws} && echo moved"})
        assert moved.text.strip() == "moved", moved.text
        res = r.call("bash", {"command": "pwd; touch here"})
        assert res.is_error and "outside the workspace" in res.text, res.text
        assert not (elsewhere / "here").exists()
