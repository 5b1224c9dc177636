"""A bash call's shell is forked, ahead of the call, from a clean bash the agent keeps (the
zygote, agent/zygote.py); a command that names `$$` gets a `bash -c` of its own. Both must be
alike, and nothing a call does to the zygote may cost a later call its output or exit code.
Run on local, docker and swarm (the fixtures of this folder); the last test drives the agent's
module in this process."""
from __future__ import annotations

import glob
import os
import re
import signal
import tempfile
import time

import pytest

from runner.agent import fsutil, procs
from runner.agent.context import Ctx

# What a shell starts with: options, traps, descriptors, stdin, signals ignored and caught (not
# the blocked mask: bash blocks some around each fork it makes), variables' names,
# shell options, functions, aliases, umask, `$!`, `$?`, its process group.
# The shell's own descriptors are read by the shell itself (a builtin glob and test): a forked
# shell is not dumpable, so no other process may read them.
FINGERPRINT = r'''echo "flags $-"; trap -p; fds=(/proc/$BASHPID/fd/*); echo "fds ${fds[*]##*/}"
[[ /proc/$BASHPID/fd/0 -ef /dev/null ]] && echo stdin /dev/null; grep -E '^Sig(Ign|Cgt)' /proc/$BASHPID/status
set -o | grep ' on$' | tr -s ' \t' ' ' | tr '\n' ','; echo; echo "last [${!-none}] status [$?]"
unset fds; compgen -v | tr '\n' ' '; echo; shopt -s | tr -s ' \t' ' ' | tr '\n' ','; echo; declare -F; alias; umask
read -r pid _ _ _ pgid sid _ </proc/$BASHPID/stat; echo "group leader $((pgid == pid)) sid $sid"'''


def run(call, command: str, **kw):
    res = call("bash", {"command": command, **kw})
    return res


def text(call, command: str) -> str:
    res = run(call, command)
    assert not res.is_error, res.text
    return res.text


def test_a_forked_shell_starts_as_its_own_bash_c_does(call):
    text(call, "f() { :; }; set -o noclobber; trap : USR1; sleep 0 & alias a=b; cd /")  # state the next must not see
    time.sleep(0.3)  # the next call's shell is forked by now
    parent = "\nread -r _ _ _ parent _ </proc/$BASHPID/stat; grep -q __runner_d /proc/$parent/cmdline && echo forked"
    forked = text(call, FINGERPRINT + parent)
    own = text(call, FINGERPRINT + parent + "\n: $$")  # names $$: its own bash -c
    assert forked.endswith("\nforked\n") and not own.endswith("\nforked\n")
    assert "group leader 1" in forked and "flags hBc" in forked and "last [none] status [0]" in forked
    fds = forked.split("fds ", 1)[1].split("\n", 1)[0].split()
    assert fds[:3] == ["0", "1", "2"] and len(fds) == 4 and "stdin /dev/null" in forked  # 4th: the glob's own
    assert "__runner" not in forked
    # alike but for the session: a forked shell is in its zygote's, its own bash -c leads one
    assert re.sub(r"sid \d+", "", forked.removesuffix("forked\n")) == re.sub(r"sid \d+", "", own)


def test_a_forked_shells_execution_string_is_its_command(call):
    """As `bash -c COMMAND` has it: it held the zygote's script (the agent's FIFO prefix with its
    pid and start time), a review found."""
    command = f'{ZYGOTE}; printf "%s" "$BASH_EXECUTION_STRING"'
    assert forked(call, command).text == command


def test_dollar_dollar_is_the_calls_own_pid(call):
    for command in ('echo "$$ $BASHPID"', 'echo "${$} $BASHPID"'):
        mine, shell = text(call, command).split()
        assert mine == shell
    pids = {text(call, "echo $BASHPID") for _ in range(3)}
    assert len(pids) == 3


def test_a_shell_that_stops_itself_is_waited_for_until_its_timeout(call):
    res = run(call, "echo before; kill -STOP $BASHPID; echo resumed", timeout=1)
    assert res.is_error and res.meta["timed_out"] and res.meta["exit_code"] == 124
    assert res.text.startswith("before\n") and "resumed" not in res.text
    assert text(call, "echo next") == "next\n"


# The zygote is the parent of a forked call's shell (a call that came before its spare was
# forked has the agent for parent: then this fails, rather than stop the agent).
ZYGOTE = "read -r _ _ _ zygote _ </proc/$BASHPID/stat; grep -q __runner_d /proc/$zygote/cmdline || exit 99"


def forked(call, command: str):
    """Run command in a forked shell: the spare is forked just after the last call's result."""
    text(call, "true")
    time.sleep(0.3)
    res = run(call, command)
    assert res.meta.get("exit_code") != 99, (res.text, res.meta)
    return res


def test_a_call_that_stops_the_zygote_keeps_its_exit_code_and_so_do_the_next(call):
    res = forked(call, f"{ZYGOTE}; kill -STOP $zygote; echo stopped; exit 4")
    assert res.meta["exit_code"] == 4 and res.text.startswith("stopped\n")  # the zygote is let go on to tell it
    for code in (5, 6):
        res = run(call, f"echo {code}; exit {code}")
        assert res.meta["exit_code"] == code and res.text.startswith(f"{code}\n")


def test_a_killed_zygote_costs_the_next_calls_nothing(call):
    forked(call, f"{ZYGOTE}; kill -KILL $zygote")  # its own status is lost with its parent
    for code in (0, 7, 8):
        res = run(call, f"echo {code}; exit {code}")
        assert res.meta["exit_code"] == code and res.text.startswith(f"{code}\n")


def test_without_a_zygote_each_call_starts_its_own_shell(tmp_path, monkeypatch):
    """No writable temp dir for the zygote's FIFOs (or a bash that cannot run it): the agent
    stops trying after a few zygotes and each call starts its own `bash -c`."""
    monkeypatch.setattr(fsutil, "_tempdir", str(tmp_path / "missing"))  # (the agent's tempfile.tempdir)
    keeper = procs._Keeper()
    monkeypatch.setattr(procs, "_keeper", keeper)
    ctx = Ctx({"workspace": str(tmp_path)})
    sent: list = []
    ctx.send = ctx.hold = sent.append
    try:
        for n in range(procs.ZYGOTE_TRIES + 2):
            procs.prepare(ctx)
            deadline = time.monotonic() + 10
            while keeper.due and time.monotonic() < deadline:  # the keeper has tried
                time.sleep(0.01)
            res = procs.bash(ctx, {"command": f"echo {n}; exit 3"}, f"c{n}")
            assert res["meta"]["exit_code"] == 3 and sent.pop() == {"op": "output", "id": f"c{n}", "data": f"{n}\n"}
        assert keeper.zygote is None and keeper.failures == procs.ZYGOTE_TRIES
    finally:
        procs.shutdown()



@pytest.fixture
def ahead(tmp_path, monkeypatch):
    """(keeper, ctx, sent): the agent's module in this process, with a keeper of its own that asks
    for the next spare as each call's shell takes its command (calls count as back to back)."""
    keeper = procs._Keeper()
    monkeypatch.setattr(procs, "_keeper", keeper)
    monkeypatch.setattr(procs, "AHEAD_WITHIN", 60.0)
    ctx = Ctx({"workspace": str(tmp_path)})
    sent: list = []
    ctx.send = ctx.hold = sent.append
    return keeper, ctx, sent


def spare_runs(keeper) -> bool:
    """Within 10 s, the keeper's spare has said it runs. keeper: its ready line is taken as the
    agent's loop takes it (settle); None: only the keeper's own thread takes it."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if keeper is not None:
            keeper.settle()
        if procs._spare is not None and procs._spare.forked.pid is not None:
            return True
        time.sleep(0.01)
    return False


def test_a_zygote_that_dies_as_its_call_ends_costs_that_call_no_internal_error(ahead):
    """The next spare is asked for while the zygote is yet to tell the status of the call's
    shell. A call that kills its zygote races that ask: a zygote seen alive there, then dead,
    was replaced, its pipe closed under the status read (EBADF: an internal error for the
    call) or, its number reused, the new zygote's line read as the old one's (no spare from
    it again). The race is certain: that ask looks at no process (no wait4 on the call's path),
    and the command ends once the zygote is a zombie."""
    keeper, ctx, sent = ahead
    try:
        procs.prepare(ctx)
        assert spare_runs(keeper)
        z = keeper.zygote.proc.pid
        res = procs.bash(ctx, {"command": f"kill -KILL {z}; until [[ $(</proc/{z}/stat) = *') Z '* ]]; do :; done; exit 3"},
                         "c1")
        assert res["meta"].get("exit_code") == 137, res  # its status went with the zygote
        procs.prepare(ctx)
        assert spare_runs(keeper), "no spare from a new zygote"
        res = procs.bash(ctx, {"command": "echo next; exit 4"}, "c2")
        assert res["meta"]["exit_code"] == 4 and sent[-1]["data"] == "next\n", res
    finally:
        procs.shutdown()


def test_a_zygote_killed_after_the_next_spare_was_asked_for_is_replaced_at_the_result(ahead):
    """Back to back the next spare is asked for as the call's shell takes its command, so a
    command that kills the zygote later leaves that ask with a dead zygote. The result's
    prepare() must give it up and fork the next call's shell from a new zygote: kept, the
    keeper's thread waited for its ready line, gave it up, and the next call had no spare."""
    keeper, ctx, sent = ahead
    try:
        procs.prepare(ctx)
        assert spare_runs(None)
        z = keeper.zygote.proc.pid
        res = procs.bash(ctx, {"command": f"sleep 0.3; kill -KILL {z}; until [[ $(</proc/{z}/stat) = *') Z '* ]]; do :; done; "
                                          "exit 3"}, "c1")
        assert res["meta"].get("exit_code") == 137, res  # its status went with the zygote
        procs.prepare(ctx)
        assert spare_runs(None), "no spare from a new zygote"
        res = procs.bash(ctx, {"command": "echo $BASH_SUBSHELL; exit 4"}, "c2")
        assert res["meta"]["exit_code"] == 4 and sent[-1]["data"] == "1\n", (res, sent[-1])  # a forked shell's
        assert keeper.zygote.proc.pid != z
    finally:
        procs.shutdown()


def test_a_command_that_removes_the_next_spares_fifos_costs_the_next_call_no_wait(ahead):
    """Back to back the next spare's FIFOs are made as the call's shell takes its command, so
    they are in the temp dir while it runs; a command that empties the temp dir removes them,
    and the zygote forks no spare for that token. The agent must see it as the call ends: kept,
    the next call waited READY_WITHIN (2 s) for a spare that never came, then ran in its own
    `bash -c` ($BASH_SUBSHELL 0)."""
    keeper, ctx, sent = ahead
    try:
        procs.prepare(ctx)
        assert spare_runs(keeper)
        prefix = procs._spare.forked.zygote.prefix
        res = procs.bash(ctx, {"command": f"sleep 0.2; rm -f {prefix}*; echo gone"}, "c1")
        assert res["meta"]["exit_code"] == 0 and sent[-1]["data"] == "gone\n", res
        procs.prepare(ctx)
        assert spare_runs(keeper), "no spare for the next call"
        res = procs.bash(ctx, {"command": "echo $BASH_SUBSHELL"}, "c2")
        assert res["meta"]["exit_code"] == 0 and sent[-1]["data"] == "1\n", (res, sent[-1])  # a forked shell's
    finally:
        procs.shutdown()


# Hostile processes of the sandbox against the zygote's pipes and FIFOs (each of these held the
# agent, lost output or ran a call's command nowhere before its fix). `: $$` runs a command in its
# own `bash -c`, so the zygote is idle meanwhile; $PPID is the agent in either kind of shell.
FIND = ('for _ in $(seq 200); do '  # the agent forks its zygote as it starts: wait for it (20 s at most)
        'for s in /proc/[0-9]*/stat; do read -r pid _ _ ppid _ 2>/dev/null <"$s"; '
        '[ "$ppid" = "$PPID" ] && [ "$pid" != "$BASHPID" ] && grep -q __runner_d "/proc/$pid/cmdline" 2>/dev/null '
        '&& zygote=$pid; done; '
        '[ -n "$zygote" ] && break; sleep 0.1; done; '
        '[ -n "$zygote" ] || exit 99; : $$')
FILL = '''python3 -c 'import os, sys
f = os.open(sys.argv[1], os.O_WRONLY | os.O_NONBLOCK)
try:
    while True:
        os.write(f, b"x" * 4096)
except BlockingIOError:
    pass' '''


def hostile(call, command: str) -> None:
    res = run(call, f"{FIND}\n{command}")
    assert res.meta["exit_code"] == 0, res.text


def test_a_stopped_zygote_with_a_full_input_holds_no_call(call):
    hostile(call, f"kill -STOP $zygote; {FILL} /proc/$zygote/fd/0")
    for code in (3, 4):
        res = run(call, f"echo {code}; exit {code}", timeout=20)
        assert res.meta["exit_code"] == code and res.text.startswith(f"{code}\n"), res.text


def test_a_stopped_spare_with_a_full_command_fifo_holds_no_call(call):
    # after this call's result the zygote forks the next call's shell: stop it and fill its FIFO
    hostile(call, "(sleep 0.5; for s in /proc/[0-9]*/stat; do read -r pid _ _ ppid _ 2>/dev/null <\"$s\"; "
                  f"[ \"$ppid\" = \"$zygote\" ] && kill -STOP $pid && {FILL} /proc/$pid/fd/3; done) >/dev/null 2>&1 &")
    time.sleep(1.5)
    for code in (3, 4):
        res = run(call, f"echo {code}; exit {code}", timeout=20)
        assert res.meta["exit_code"] == code and res.text.startswith(f"{code}\n"), res.text


def test_a_status_line_written_by_another_process_does_not_end_a_call(call):
    hostile(call, "(sleep 1; printf 'x 0\\n' >/proc/$zygote/fd/1) >/dev/null 2>&1 &")
    res = run(call, "echo a; sleep 2; echo b; exit 5", timeout=30)
    assert res.meta["exit_code"] == 5 and res.text.startswith("a\nb\n"), res.text


def test_bytes_flooded_into_the_zygotes_pipes_cost_a_call_not_its_exit_code(call):
    """A call's shell writes bytes with no newline into the zygote's input and its status pipe
    (as a flooder of every pipe does), then exits 3: the zygote's status line comes after the
    flood's bytes, and the bytes read as tokens make no spare. Failed twice before: that status
    was lost, and once the zygote read tokens (16 bytes at a time) a failed spare's `x 126` was
    taken for the call's (the flood test of tests/integration/security/test_channel.py under load); with
    lines, the zygote waited for a newline and the status never came (137)."""
    flood = ("printf 'A%.0s' {1..5000} >/proc/$zygote/fd/1 && printf 'B%.0s' {1..100} >/proc/$zygote/fd/0 "
             "&& echo flooded; exit 3")
    res = forked(call, f"{ZYGOTE}; {flood}")
    assert res.meta["exit_code"] == 3 and res.text.startswith("flooded\n"), res.text
    for code in (0, 4):
        res = run(call, f"echo {code}; exit {code}", timeout=20)
        assert res.meta["exit_code"] == code and res.text.startswith(f"{code}\n"), res.text


def test_a_shells_own_status_line_written_by_another_process_does_not_end_a_call(call):
    """A spare tells its own status (`s STATUS PID`) just before it closes its output, once its
    command has returned; that line is taken only once no writer is left on the output, and one
    read before is dropped. Here another process writes it, with the running shell's pid, while
    the shell still holds its output: the call goes on to its end and its own exit code. In step,
    not by the clock: the line is written once the call's shell runs (it made `go`), and the call
    goes on only once the agent has read the line out of the zygote's pipe (`done`)."""
    # (Names of this run's own: the local executor's /tmp is the host's.)
    go, done = (f"/tmp/fs-{os.getpid()}-{time.monotonic_ns()}-{n}" for n in ("go", "done"))
    hostile(call, f"(until [ -e {go} ]; do sleep 0.05; done; "
                  "for s in /proc/[0-9]*/stat; do read -r pid _ _ ppid _ 2>/dev/null <\"$s\"; "
                  "[ \"$ppid\" = \"$zygote\" ] && printf 's 0 %s\\n' $pid >/proc/$zygote/fd/1; done; "
                  f"{UNREAD} /proc/$zygote/fd/1; : >{done}) >/dev/null 2>&1 &")
    res = run(call, f"echo a; : >{go}; until [ -e {done} ]; do sleep 0.05; done; rm -f {go} {done}; echo b; exit 5",
              timeout=30)
    assert res.meta["exit_code"] == 5 and res.text.startswith("a\nb\n"), res.text


# Waits (20 s at most) until a pipe holds no unread byte: its reader has taken what was written.
UNREAD = """python3 -c 'import fcntl, os, struct, sys, termios, time
f = os.open(sys.argv[1], os.O_RDONLY | os.O_NONBLOCK)
for _ in range(400):
    if struct.unpack("i", fcntl.ioctl(f, termios.FIONREAD, b"0000"))[0] == 0:
        break
    time.sleep(0.05)'"""


def test_a_commands_exit_trap_keeps_its_output_and_sees_its_status(call):
    """A command that returned tells its status and closes its output at once (zygote.TAIL),
    unless it set an EXIT trap: that trap's output, both streams, is the call's, and it runs as it
    would have (its $? the command's status). A command that names `trap` runs no TAIL (nor do its
    DEBUG trap's runs show it); one that sets a trap another way (here through a variable) is
    looked at before the output is closed: its trap is traced under set -x after one `+ exit N`
    line of ours, and no check of ours fires its ERR trap, errexit or noclobber's refusal."""
    for trap in ("trap", "t=tr; ${t}ap"):
        res = forked(call, f"{ZYGOTE}; {trap} 'echo \"bye $?\"; echo err >&2' EXIT; echo a; (exit 3)")
        assert res.meta["exit_code"] == 3 and res.text.startswith("a\nbye 3\nerr\n"), (trap, res.text)
    res = forked(call, f"{ZYGOTE}; trap 'echo dbg' DEBUG; echo a")
    assert res.meta["exit_code"] == 0 and res.text == "dbg\na\n", res.text
    res = forked(call, f"{ZYGOTE}; set -eux -o noclobber; t=tr; ${{t}}ap 'echo bye' EXIT; echo a")
    assert res.meta["exit_code"] == 0, res.text
    assert res.text.splitlines()[-4:] == ["a", "+ exit 0", "++ echo bye", "bye"], res.text
    res = forked(call, f"{ZYGOTE}; set -eux -o noclobber; t=tr; ${{t}}ap 'echo ERR' ERR; echo a")
    assert res.meta["exit_code"] == 0, res.text
    assert res.text.splitlines()[-3:] == ["++ trap 'echo ERR' ERR", "++ echo a", "a"], res.text
    assert text(call, "echo next") == "next\n"


def test_a_ready_line_written_by_another_process_does_not_take_a_call(call):
    job = text(call, "sleep 600 >/dev/null 2>&1 & echo $!").strip()
    try:
        hostile(call, f"kill -STOP $zygote; printf 'r {job}\\n' >/proc/$zygote/fd/1")
        res = run(call, "echo hello; exit 3", timeout=20)
        assert res.meta["exit_code"] == 3 and res.text.startswith("hello\n"), res.text
        assert text(call, f"kill -0 {job} && echo alive") == "alive\n"  # nothing was done to it
    finally:
        run(call, f"kill {job}")


def _new_agent_entries(before: set[str], zygote: int) -> set[str]:
    """The agents' entries in the temporary directory made since `before` by this test's agents:
    those named for a process that is gone (the killed agent), or for the zygote. Entries named for
    a live process are another agent's: another test run on this machine (a helper's, a parallel
    worker's) makes and removes its own while this test runs, and they are not this test's."""
    made = set(glob.glob(os.path.join(tempfile.gettempdir(), "runner-agent-*"))) - before
    mine = set()
    for p in made:
        pid = os.path.basename(p)[len("runner-agent-"):].split(".", 1)[0]
        if not pid.isdigit() or int(pid) == zygote or not os.path.exists(f"/proc/{pid}"):
            mine.add(p)
    return mine


def test_a_killed_agent_leaves_no_zygote_even_a_stopped_one(tmp_path):
    """The zygote has a session of its own; killed with the agent (PR_SET_PDEATHSIG), it does not
    outlive an agent that had no time for its shutdown (a stopped one stayed for good). The FIFOs
    exist only while a spare is forked: the agent killed then (here, while it forks from the
    stopped zygote, if it had not forked before the stop) leaves its two, and the next agent's
    zygote removes them (a directory per zygote was left in /tmp before; then, in one CI run, two
    FIFOs)."""
    from runner import Runner

    zygote = None
    before = set(glob.glob(os.path.join(tempfile.gettempdir(), "runner-agent-*")))
    with Runner(executor="local", workspace=tmp_path, pool_size=0) as r:
        sb = r.session.make_sandbox().start()
        try:
            agent = sb.info["pid"]
            out: list[str] = []
            res = sb.call("c1", "bash", {"command": FIND + "\necho $zygote"}, timeout=30, on_output=out.append)
            assert not res["is_error"], res
            zygote = int("".join(out))
            os.kill(zygote, signal.SIGSTOP)
            os.kill(agent, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and os.path.exists(f"/proc/{zygote}") and _state(zygote) != "Z":
                time.sleep(0.05)
            assert not os.path.exists(f"/proc/{zygote}") or _state(zygote) == "Z", "the zygote outlived its agent"
            assert all(p.startswith(f"{tempfile.gettempdir()}/runner-agent-{agent}.")
                       for p in _new_agent_entries(before, zygote)), "left behind, and not the agent's FIFOs"
            next_sb = r.session.make_sandbox().start()
            try:
                res = next_sb.call("c2", "bash", {"command": "true"}, timeout=30)
                assert not res["is_error"], res
            finally:
                next_sb.close()
            assert not _new_agent_entries(before, zygote), "the agent's FIFOs (or their directory) stayed behind"
            # nor a spare the zygote forked just before the stop (it waited in open(2) for good:
            # test_a_spare_forked_as_its_agent_dies_does_not_wait_for_it_for_good)
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and _processes_naming(f"runner-agent-{agent}."):
                time.sleep(0.05)
            assert not _processes_naming(f"runner-agent-{agent}."), "a spare outlived its agent"
        finally:
            sb.close()
            if zygote is not None and _state(zygote) not in ("gone", "Z"):
                os.kill(zygote, signal.SIGKILL)  # what a failure here left behind
            for pid in _processes_naming(f"runner-agent-{sb.info['pid']}."):
                os.kill(pid, signal.SIGKILL)


def test_a_spares_fifos_are_gone_while_the_agent_waits_for_its_next_call(tmp_path):
    """The next call's spare is asked for by the agent's own thread, which then reads its next
    request: its ready line is taken there (server.Wire.receive watches the zygote's pipe), so
    the spare's two FIFOs are removed at once and do not wait for the next call in the temp dir
    (where an agent killed meanwhile would leave them)."""
    from runner import Runner

    with Runner(executor="local", workspace=tmp_path, pool_size=0) as r:
        sb = r.session.make_sandbox().start()
        try:
            mine = os.path.join(tempfile.gettempdir(), f"runner-agent-{sb.info['pid']}.*")
            for n in range(3):
                res = sb.call(f"c{n}", "bash", {"command": "true"}, timeout=30)
                assert not res["is_error"], res
                # gone for 50 ms running: the next spare is asked for just after the result, so a
                # look before that ask saw none, and one during it saw its first FIFO only
                deadline, empty_since = time.monotonic() + 5, None
                while time.monotonic() < deadline:
                    left = glob.glob(mine)
                    if left:
                        empty_since = None
                    elif empty_since is None:
                        empty_since = time.monotonic()
                    elif time.monotonic() - empty_since >= 0.05:
                        break
                    time.sleep(0.01)
                assert not left, f"after call {n}, the next spare's FIFOs wait for the next call"
        finally:
            sb.close()


def _state(pid: int) -> str:
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def test_the_fifos_of_an_ended_agent_are_swept_and_no_other_file(tmp_path):
    """What an agent killed while forking left (its two FIFOs, named with its pid and start time)
    the next zygote removes, even while the agent is a zombie (that failed first) and when its pid
    now names another process (a start time that is not that process's: that failed first too);
    so it does an empty file of such a name (a spare given up as it opened its FIFOs makes one,
    `<>`), and one of this agent's own as its zygote closes. The FIFOs of a live agent, a file
    that holds something, and a link to a FIFO stay."""
    from executors.posix import process_start_time
    from runner.agent import zygote

    import subprocess

    dead = int(open("/proc/sys/kernel/pid_max").read()) + 1  # a pid no process can have
    zombie = subprocess.Popen(["true"])  # killed, and not yet reaped by its parent
    while _state(zombie.pid) != "Z":
        time.sleep(0.01)
    me = os.getpid()
    start = int(process_start_time(me))
    names = {"dead": f"runner-agent-{dead}-ab.in", "dead2": f"runner-agent-{dead}-ab.out",
             "zombie": f"runner-agent-{zombie.pid}-ab.in", "reused": f"runner-agent-{me}.{start - 1}-ab.in",
             "live": f"runner-agent-{me}.{start}-ab.in", "bare": f"runner-agent-{me}-ab.in",
             "file": f"runner-agent-{dead}-cd.in", "made": f"runner-agent-{dead}-gh.out",
             "made_mine": f"runner-agent-{me}.{start}-ij.in",
             "link": f"runner-agent-{dead}-ef.out", "other": "runner-agentx-1-ab.in"}
    for key, name in names.items():
        path = tmp_path / name
        if key == "file":
            path.write_text("x")
        elif key.startswith("made"):
            path.write_text("")
        elif key == "link":
            os.mkfifo(tmp_path / "target")
            path.symlink_to(tmp_path / "target")
        else:
            os.mkfifo(path)
    try:
        zygote._sweep(str(tmp_path))
        left = {p.name for p in tmp_path.iterdir()}
        assert not {names["dead"], names["dead2"], names["zombie"], names["reused"], names["made"]} & left
        assert {names["live"], names["bare"], names["file"], names["link"], names["other"], "target",
                names["made_mine"]} <= left
        zygote._sweep(str(tmp_path), mine=f"runner-agent-{me}.{start}-")  # as this agent's zygote closes
    finally:
        zombie.wait()
    left = {p.name for p in tmp_path.iterdir()}
    assert names["made_mine"] not in left
    assert {names["live"], names["bare"], names["file"], names["link"], names["other"], "target"} <= left


def test_a_shell_tells_its_own_status_once_its_command_returns(tmp_path):
    """The spare's own `s` line gives its status once its output is over: here its zygote is
    stopped, so the zygote's line can never come, and the status comes all the same (this waited
    out its timeout before). A command with an EXIT trap keeps its output open for the trap and
    tells nothing itself: its status waits for the zygote's line. A status is given out once."""
    from runner.agent import zygote

    z = zygote.Zygote(procs.BASH, str(tmp_path), {"PATH": os.environ["PATH"]})

    def run_stopped(command: bytes):
        """The command in a spare forked by z, which is stopped once the spare runs: (its output, the spare)."""
        f = z.order()
        assert f.ready(10)
        os.kill(z.proc.pid, signal.SIGSTOP)
        assert f.give(command)
        return _output(f), f

    try:
        out, f = run_stopped(b"echo a; (exit 4)")
        assert out == b"a\n" and f.wait(10) == 4
        os.kill(z.proc.pid, signal.SIGCONT)
        out, f = run_stopped(b"t=tr; ${t}ap 'echo bye' EXIT; (exit 5)")
        assert out == b"bye\n" and f.wait(0.5) is None
        os.kill(z.proc.pid, signal.SIGCONT)
        assert f.wait(10) == 5
        assert z.ended == {} and z.told == {}
    finally:
        os.kill(z.proc.pid, signal.SIGCONT)
        z.close()


def test_a_background_job_is_told_ended_only_with_all_its_output(tmp_path):
    """A job's output is read on a thread: its status said `exited` while the last bytes were
    still in the pipe, unread, and a poll right after it showed none (a CI failure, the miclaw
    dialect's process test). Here the reader starts only once the job has ended."""
    import subprocess
    import threading

    go = threading.Event()

    class LateReader(procs.Job):
        def _read(self):
            go.wait()
            super()._read()

    proc = subprocess.Popen(["sh", "-c", "echo ready; echo done"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    job = LateReader(proc, "echo")
    proc.wait()
    threading.Timer(0.2, go.set).start()  # the reader runs late: what a loaded machine does
    st = job.state()
    assert not st["running"] and st["exit_code"] == 0
    assert job.newest() == "ready\ndone\n"
    proc.stdin.close()
    proc.stdout.close()


@pytest.mark.parametrize("lend", [False, True], ids=["own", "lent"])
def test_a_spare_forked_as_its_agent_dies_does_not_wait_for_it_for_good(tmp_path, lend):
    """An agent killed after it asked for a spare, once the zygote forked it and before the
    spare opened its FIFOs, held the other ends of both: the spare's open(2) waited for a
    process that would never come, for good (the zygote dies with the agent, the spare has no
    death signal of its own). Here the agent's death is its descriptors' end while the zygote
    is stopped, so the spare opens only after it: it must end on its own (it waited in open,
    and the zygote waiting for it, before the fix)."""
    import subprocess

    from runner.agent import zygote

    z = zygote.Zygote(procs.BASH, str(tmp_path), {"PATH": os.environ["PATH"]})
    os.kill(z.proc.pid, signal.SIGSTOP)
    f = z.order(lend=lend)
    try:
        for fd in f.fds():  # the agent's ends of the spare's FIFOs, and its pipes to the zygote, go
            os.close(fd)
        f.cmd_fd = f.st_fd = f.stdout.fd = -1
        z.proc.stdin.close()
        z.proc.stdout.close()
        os.kill(z.proc.pid, signal.SIGCONT)  # it reads the token, already in its input, and forks
        try:
            z.proc.wait(timeout=10)  # its spare ends (its ready line has no reader), then it
        except subprocess.TimeoutExpired:
            pytest.fail("the zygote still waits for a spare that waits in open(2)")
        assert not _processes_naming(z.prefix), "a spare outlived its zygote"
    finally:
        for pid in _processes_naming(z.prefix):  # what a failure here leaves
            os.kill(pid, signal.SIGKILL)
        if z.proc.poll() is None:
            os.kill(z.proc.pid, signal.SIGKILL)
            z.proc.wait()
        zygote._unlink(f.fifos)


def _processes_naming(text: str) -> list[int]:
    """The pids of the processes whose command line holds text (a zygote's and its spares')."""
    found = []
    for path in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            with open(path, "rb") as fh:
                if text.encode() in fh.read():
                    found.append(int(path.split("/")[2]))
        except (OSError, ValueError):
            pass
    return [pid for pid in found if _state(pid) not in ("Z", "gone")]


def test_a_spare_whose_output_fifo_is_gone_when_it_opens_never_says_it_runs(tmp_path):
    """A process of the sandbox that removes a spare's output FIFO before the spare opens it (the
    zygote looks only for the command's) made the spare create a plain file by that name, write
    its output there and say it runs: the call given to it waited out its timeout for output
    that never came. Now the spare sees that what it opened is no FIFO and ends unready; the
    agent removes the file, and the zygote's next spare runs a command as ever."""
    from runner.agent import zygote

    z = zygote.Zygote(procs.BASH, str(tmp_path), {"PATH": os.environ["PATH"]})
    try:
        os.kill(z.proc.pid, signal.SIGSTOP)
        f = z.order()
        os.unlink(f.fifos[1])  # PREFIX T.out
        os.kill(z.proc.pid, signal.SIGCONT)
        with pytest.raises(zygote.SpareLost, match="ended before it ran"):
            f.ready(30)
        assert not any(os.path.lexists(p) for p in f.fifos), "the spare's names stayed behind"
        _still_forks(z)
    finally:
        os.kill(z.proc.pid, signal.SIGCONT)
        z.close()


def test_a_spare_the_zygote_skips_is_told_not_waited_for(tmp_path):
    """A token whose command FIFO a process of the sandbox removed is skipped by the zygote, which
    says so (`x 127 T`): the agent gives that spare up at once, where it waited out READY_WITHIN
    for a ready line that never came (the call's own path) or looked at the FIFOs' names at every
    wake-up of the zygote's pipe (the lender's). The zygote forks the next as ever."""
    import select

    from runner.agent import zygote

    z = zygote.Zygote(procs.BASH, str(tmp_path), {"PATH": os.environ["PATH"]})

    def skipped(lend: bool):
        os.kill(z.proc.pid, signal.SIGSTOP)
        f = z.order(lend=lend)
        os.unlink(f.fifos[0])  # PREFIX T.in
        os.kill(z.proc.pid, signal.SIGCONT)
        return f

    try:
        f = skipped(lend=False)
        with pytest.raises(zygote.SpareLost, match="ended before it ran"):
            f.ready(30)
        f = skipped(lend=True)
        select.select([z.out], [], [], 30)  # the zygote's line
        assert f.ready(0) is False and f.lost(names=False), "the zygote's word was not taken"
        assert not any(os.path.lexists(p) for p in f.fifos)
        _still_forks(z)
    finally:
        os.kill(z.proc.pid, signal.SIGCONT)
        z.close()


def test_a_spares_status_comes_with_the_next_spares_ready_line_when_that_one_waits(tmp_path):
    """Back to back the next spare's token waits in the zygote's input while a spare runs: the
    zygote then tells the ended spare's status in the next spare's ready line, one write, where
    it wrote it alone first (two wake-ups of the agent a call). Here the zygote is stopped while
    the first spare's command ends, so both lines are there by the time anything is."""
    import select

    from runner.agent import zygote

    z = zygote.Zygote(procs.BASH, str(tmp_path), {"PATH": os.environ["PATH"]})
    try:
        first = z.order()
        assert first.ready(10)
        second = z.order()  # its token waits in the zygote's input
        os.kill(z.proc.pid, signal.SIGSTOP)
        assert first.give(b"exit 3")  # exit: no status of its own, the zygote's word
        _output(first)
        os.kill(z.proc.pid, signal.SIGCONT)
        assert select.select([z.out], [], [], 30)[0]
        got = os.read(z.out, 4096)
        assert re.fullmatch(rb"x 3 %s\nr \d+ %s\n" % (first.token, second.token), got), got
    finally:
        os.kill(z.proc.pid, signal.SIGCONT)
        z.close()


def test_a_status_held_for_the_next_ready_line_is_told_when_that_spare_never_runs(tmp_path):
    """The status the zygote holds for the next spare's ready line is not lost with a next spare
    that ends before that line (here its output FIFO is gone): the zygote tells it then."""
    from runner.agent import zygote

    z = zygote.Zygote(procs.BASH, str(tmp_path), {"PATH": os.environ["PATH"]})
    try:
        first = z.order()
        assert first.ready(10)
        second = z.order()
        os.unlink(second.fifos[1])  # PREFIX T.out: that spare ends unready
        assert first.give(b"exit 3")
        _output(first)
        assert first.wait(10) == 3
        with pytest.raises(zygote.SpareLost, match="ended before it ran"):
            second.ready(30)
    finally:
        z.close()


def _output(f) -> bytes:
    """A spare's output, to its end."""
    out = b""
    while chunk := os.read(f.stdout.fd, 4096):
        out += chunk
    return out


def _still_forks(z) -> None:
    """The zygote's next spare runs a command as ever."""
    f = z.order()
    assert f.ready(10) and f.give(b"echo ran")
    assert _output(f) == b"ran\n" and f.wait(10) == 0


@pytest.mark.parametrize("how", ["redirection", "end"])
def test_a_held_status_is_told_however_the_zygote_goes_on(tmp_path, how):
    """A status held for the next spare's ready line is told all the same when that spare's
    redirections fail (status 1, as an ordinary command's: a directory where its output FIFO
    was), and at the input's end. Each lost it first."""
    from runner.agent import zygote

    z = zygote.Zygote(procs.BASH, str(tmp_path), {"PATH": os.environ["PATH"]})
    made = ""
    try:
        first = z.order()
        assert first.ready(10)
        if how == "redirection":
            second = z.order()
            os.unlink(second.fifos[1])
            os.mkdir(made := second.fifos[1])
        else:
            z.proc.stdin.close()
        assert first.give(b"exit 3")
        _output(first)
        assert first.wait(10) == 3
    finally:
        if made:
            os.rmdir(made)
        z.close()


def test_a_spare_lost_costs_its_call_the_fork_not_the_zygote(ahead):
    """A spare the zygote says will never run (its command FIFO removed; a forged line says the
    same) makes the call that takes it start its own shell; the zygote stays, with no failure
    counted (it was dropped and counted as failed: three such and a session's calls had no
    zygote). Here the zygote is stopped while the next spare is asked for, and that spare's FIFO
    removed before it goes on."""
    keeper, ctx, sent = ahead
    try:
        procs.prepare(ctx)
        assert spare_runs(keeper)
        assert procs.bash(ctx, {"command": "true"}, "c1")["meta"]["exit_code"] == 0
        procs.prepare(ctx)
        assert spare_runs(keeper)
        z = keeper.zygote
        os.kill(z.proc.pid, signal.SIGSTOP)
        try:
            assert procs.bash(ctx, {"command": "(exit 5)"}, "c2")["meta"]["exit_code"] == 5  # its own status line
            procs.prepare(ctx)
            lost = procs._spare.forked
            assert lost.pid is None, "the next spare ran with its zygote stopped"
            os.unlink(lost.fifos[0])  # PREFIX T.in
        finally:
            os.kill(z.proc.pid, signal.SIGCONT)
        res = procs.bash(ctx, {"command": "echo $BASH_SUBSHELL"}, "c3")
        assert res["meta"]["exit_code"] == 0 and sent[-1]["data"] == "0\n", (res, sent[-1])  # its own bash -c
        assert keeper.zygote is z and z.alive() and keeper.failures == 0
    finally:
        procs.shutdown()


def test_a_closing_zygote_removes_the_empty_files_its_given_up_spares_made(tmp_path):
    """A spare the agent gave up (its names removed) just as it opened its FIFOs made empty files
    of those names (`<>` creates them): nothing removed them (hundreds from a loop of spares asked
    for and closed at once, a review found). The agent's zygotes remove such files of its own as
    they close, and ones of agents that ended as they start."""
    from runner.agent import zygote

    z = zygote.Zygote(procs.BASH, str(tmp_path), {"PATH": os.environ["PATH"]})
    made = [z.prefix + "0123456789abcdef.in", z.prefix + "0123456789abcdef.out"]
    for path in made:
        open(path, "x").close()
    z.close()
    assert not any(os.path.lexists(p) for p in made)


def test_signals_ignored_where_the_controller_runs_are_not_a_calls(tmp_path):
    """A controller started as a job of a script (SIGINT and SIGQUIT ignored) or under nohup
    (SIGHUP) passed those to every call of the local executor: its shell listed them in `trap -p`
    and ignored them, as a `bash -c` from a clean parent does not (a CI run started in the
    background failed two tests here). Forked or its own, a call starts as it does from a clean
    parent."""
    from runner import Runner

    def calls():
        with Runner(executor="local", workspace=tmp_path, pool_size=0) as r:
            got = []
            for command in ("trap -p; grep SigIgn /proc/$BASHPID/status", "trap -p; grep SigIgn /proc/$BASHPID/status; : $$"):
                r.call("bash", {"command": "true"})
                time.sleep(0.3)  # the next call's shell is forked by now
                got.append(r.call("bash", {"command": command}).text)
            return got

    clean = calls()
    assert all(not text.startswith("trap") for text in clean), clean
    saved = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT)}
    try:
        assert calls() == clean
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)
