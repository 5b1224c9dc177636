"""`runner exec -it` as a person uses it, in a real terminal: a tmux pane (send-keys, capture-pane).
The pane runs a shell that records the terminal's settings, runs `runner exec -it`, then prints
its exit status and whether the settings came back."""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import wait_for

pytestmark = [pytest.mark.usefixtures("no_leaks"),
              pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux missing (scripts/setup.sh installs it)")]

ROOT = str(Path(__file__).resolve().parents[3])  # the checkout


class Pane:
    def __init__(self, server: str) -> None:
        self.server = server

    def tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.server, *args], capture_output=True, text=True, check=True,
                              timeout=30).stdout

    def screen(self) -> str:
        return self.tmux("capture-pane", "-p", "-J", "-S", "-200")

    def keys(self, *keys: str) -> None:
        self.tmux("send-keys", *keys)

    def line(self, text: str) -> None:
        self.tmux("send-keys", "-l", text)
        self.tmux("send-keys", "Enter")

    def shows(self, text: str, timeout: float = 60) -> str:
        return wait_for(lambda: (lambda s: s if text in s else None)(self.screen()), timeout)

    def prompt_after(self, mark: str, timeout: float = 60) -> str:
        """Wait for the shell's prompt after the output `mark`: the shell reads its next line then
        (a key sent before it may reach the command still running, or be lost as readline starts)."""
        return wait_for(lambda: (lambda s: s if mark in s and PROMPT.strip() in s.rsplit(mark, 1)[1] else None)(
            self.screen()), timeout)

    def prompts(self, count: int, timeout: float = 60) -> str:
        """Wait for the count-th prompt of the shell in the container."""
        return wait_for(lambda: (lambda s: s if s.count(PROMPT.strip()) >= count else None)(self.screen()), timeout)


PROMPT = "rx$ "  # (capture-pane drops a line's trailing blanks: counted without its space)


@pytest.fixture
def pane(tmp_path):
    """A tmux server of this test's own, 100x30, running `runner exec ARGS` in a shell; the
    runner's pid is written to tmp_path/pid."""
    server = f"runner-test-{os.getpid()}"
    made = []

    def start(*args: str, command: str = "exec") -> Pane:
        runner = " ".join(shlex.quote(x) for x in (sys.executable, "-m", "runner", command, *args))
        runner = f"sh -c {shlex.quote(f'echo $$ > {tmp_path}/pid; exec {runner}')}"
        script = (f'cd {shlex.quote(ROOT)}; before=$(stty -g); {runner}; echo "EXIT=$?"; '
                  '[ "$(stty -g)" = "$before" ] && echo SETTINGS-RESTORED; sleep 600')
        subprocess.run(["tmux", "-L", server, "-f", "/dev/null", "new-session", "-d", "-x", "100", "-y", "30",
                        "sh", "-c", script], check=True, timeout=30,
                       env={**os.environ, "TERM": "xterm"})
        pane = Pane(server)
        made.append(pane.tmux("display-message", "-p", "#{socket_path}").strip())
        return pane

    yield start
    for path in made:  # the server, and its socket (tmux leaves it behind)
        subprocess.run(["tmux", "-S", path, "kill-server"], capture_output=True, timeout=30)
        if os.path.exists(path):
            os.unlink(path)


def shell(*extra: str) -> tuple[str, ...]:
    """An interactive bash in the container with a prompt of its own (PROMPT)."""
    return (*extra, "-e", f"PS1={PROMPT}", "--", "bash", "--norc", "-i")


def test_an_interactive_shell_has_a_terminal_of_the_panes_size(pane):
    p = pane("-it", *shell())
    p.prompts(1)
    p.line("tty; stty size; echo fin''ished")
    screen = p.shows("finished")
    assert "/dev/pts/" in screen and "not a tty" not in screen, screen
    assert "30 100" in screen, screen
    p.tmux("resize-window", "-x", "120", "-y", "40")
    p.line("stty size")
    screen = p.shows("40 120")
    p.line("exit 3")
    screen = p.shows("EXIT=3")
    assert "SETTINGS-RESTORED" in p.shows("SETTINGS-RESTORED"), screen


def test_ctrl_c_ctrl_z_and_ctrl_d_reach_the_program(pane):
    p = pane("-it", *shell())
    p.prompts(1)
    p.line("echo sleep''ing; sleep 500")  # (what it prints is not what was typed)
    p.shows("sleeping")
    p.keys("C-c")
    p.line("echo status=$?")  # the sleep was interrupted, the shell lives on
    p.shows("status=130")
    p.line("echo stopp''ing; sleep 400")
    p.shows("stopping")
    p.keys("C-z")
    p.shows("Stopped")  # stopped, a job of the shell in the container
    p.line("jobs; echo li''sted")
    screen = p.shows("listed")
    assert "sleep 400" in screen, screen
    p.line("kill -9 %1; wait; echo ki''lled")  # (a stopped job would keep the shell from exiting)
    p.prompt_after("killed")  # (once, at load 11, the shell never exited after a C-d sent before it)
    p.keys("C-d")  # end of input at the prompt: the shell exits 0
    p.shows("EXIT=0")
    p.shows("SETTINGS-RESTORED")


def test_the_terminal_is_restored_when_runner_is_told_to_stop(pane, tmp_path):
    """SIGTERM to `runner exec -it`: passed on to the shell, which ignores it (an interactive
    bash does): killed after --stop-timeout; the caller's terminal is as it was."""
    p = pane("-it", "--stop-timeout", "1", *shell())
    p.prompts(1)
    os.kill(int((tmp_path / "pid").read_text()), 15)
    p.shows("EXIT=137")
    p.shows("SETTINGS-RESTORED")


def test_a_failure_before_the_start_leaves_the_terminal_as_it_was(pane):
    p = pane("-it", "--image", "no-such/image:1", "--", "bash")
    screen = p.shows("EXIT=125")
    assert "not on this engine" in screen
    p.shows("SETTINGS-RESTORED")


def test_attach_to_a_detached_interactive_shell(pane, run_cli, docker_client):
    name = f"runner-test-{os.getpid()}-attach"
    started = run_cli("exec", "-dit", "--name", name, *shell())
    assert started.returncode == 0, started.stderr
    try:
        p = pane(name, command="attach")
        p.keys("Enter")  # its first prompt came before we attached: ask for another
        p.prompts(1)  # (the resize at the attach may redraw it: what follows waits for its own mark)
        p.line("tty; stty size; echo fin''ished")
        screen = p.shows("finished")
        assert "/dev/pts/" in screen and "30 100" in screen, screen
        p.line("exit 3")
        p.shows("EXIT=3")
        p.shows("SETTINGS-RESTORED")
    finally:
        run_cli("stop", "-t", "1", name)
    assert docker_client.api.containers(all=True, filters={"name": name}) == []


def test_it_with_a_pipe_on_stdin_is_refused(run_cli):
    p = run_cli("exec", "-it", "--", "true", input=b"x")
    assert p.returncode == 125 and b"not a terminal" in p.stderr, p.stderr


def test_the_image_has_its_long_option_and_dash_capital_i(run_cli):
    p = run_cli("exec", "-I", "runner/base", "--", "echo", "ok")
    assert (p.returncode, p.stdout) == (0, b"ok\n"), p.stderr
