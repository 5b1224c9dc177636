"""Protected paths stay protected for the whole session, the user's own git on the host never runs
a program the sandbox chose, and the controller never follows, opens or trips over what the
sandbox left in the workspace (links, loops, FIFOs, sockets). Real Docker, real git, real files."""
from __future__ import annotations

import os
import socket
import subprocess
import threading
from pathlib import Path

import pytest

from runner import Runner
from runner.errors import RunnerError

LIMITS = {"limits.memory": "256m", "limits.pids": 128, "limits.timeout": 30}
HOOK = "#!/bin/sh\ntouch PWNED\n"


def chown_tree(root: Path) -> None:
    """The sandbox runs as the workspace's owner (1000)."""
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [".", *dirnames, *filenames]:
            os.chown(Path(dirpath, name), 1000, 1000, follow_symlinks=False)


def host_git(ws: Path, *args: str) -> subprocess.CompletedProcess:
    """The user's git on the host, with no configuration but the repository's own."""
    env = {"PATH": os.environ["PATH"], "HOME": str(ws.parent), "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(["git", "-c", "safe.directory=*", "-c", "user.name=u", "-c", "user.email=u@example.invalid",
                           *args], cwd=ws, env=env, capture_output=True, text=True)


def snapshot(root: Path) -> dict:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath, name)
            out[str(p.relative_to(root))] = p.read_bytes() if p.is_file() and not p.is_symlink() else p.is_dir()
    return out


@pytest.fixture
def repo(tmp_path) -> Path:
    """A git repository with one commit and a hook, owned by the sandbox's user."""
    ws = tmp_path / "ws"
    ws.mkdir()
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    (ws / "README").write_text("hello\n")
    (ws / ".git" / "hooks" / "pre-commit").write_text("#!/bin/sh\nexit 0\n")
    (ws / ".git" / "hooks" / "pre-commit").chmod(0o755)
    assert host_git(ws, "add", "README").returncode == 0
    assert host_git(ws, "commit", "-qm", "first").returncode == 0
    chown_tree(ws)
    return ws


def runner(ws: Path, **kw) -> Runner:
    overrides = {**LIMITS, **kw.pop("overrides", {})}
    return Runner(executor="docker", workspace=ws, preset="all", overrides=overrides, **kw)


def bash(r: Runner, command: str):
    return r.call("bash", {"command": command})


def the_host_git_runs_nothing(ws: Path) -> None:
    """The user's next git commands on the host: none may run a program the sandbox planted."""
    (ws / "README").write_text("changed by the user\n")
    host_git(ws, "status")
    host_git(ws, "commit", "-qam", "by the user")
    host_git(ws, "diff", "HEAD~1")
    assert not (ws / "PWNED").exists(), "the host's git ran a program the sandbox planted"


# -- case 5: the user's own git ---------------------------------------------------------------------
def test_renaming_dot_git_cannot_plant_a_hook_for_the_host_git(repo, no_leaks):
    with runner(repo) as r:
        res = bash(r, "mv .git .git_old && cp -r .git_old .git && printf '#!/bin/sh\\ntouch PWNED\\n' > "
                      ".git/hooks/pre-commit && chmod +x .git/hooks/pre-commit")
        assert "Device or resource busy" in res.content, res.content
        assert bash(r, "rm -rf .git; test -d .git/hooks && echo still-there").content.strip().endswith("still-there")
    assert not (repo / ".git_old").exists()
    the_host_git_runs_nothing(repo)


@pytest.mark.parametrize("command", [
    "git config core.hooksPath /workspace/h",
    "git config core.fsmonitor 'touch PWNED; false'",
    "printf '[core]\\n\\tfsmonitor = touch PWNED; false\\n' >> .git/config",
    "printf '[core]\\n\\tfsmonitor = touch PWNED; false\\n' > /tmp/c && mv /tmp/c .git/config",
    "cp .git/config /tmp/c && echo '[core] fsmonitor = touch PWNED' >> /tmp/c && rm -f .git/config && cp /tmp/c .git/config",
    "printf '#!/bin/sh\\ntouch PWNED\\n' > .git/hooks/pre-commit",
    "mv .git/hooks .git/hooks_old && mkdir .git/hooks",
])
def test_the_sandbox_cannot_make_the_host_git_run_programs(repo, no_leaks, command):
    (repo / "h").mkdir()
    (repo / "h" / "pre-commit").write_text(HOOK)
    (repo / "h" / "pre-commit").chmod(0o755)
    chown_tree(repo)
    config = (repo / ".git" / "config").read_bytes()
    with runner(repo) as r:
        res = bash(r, command)
        assert res.is_error, res.content
    assert (repo / ".git" / "config").read_bytes() == config
    the_host_git_runs_nothing(repo)


def test_submodule_and_worktree_git_dirs_are_protected(repo, no_leaks):
    mod = repo / ".git" / "modules" / "sub"
    (mod / "hooks").mkdir(parents=True)
    (mod / "config").write_text("[core]\n\tbare = false\n")
    (repo / ".git" / "worktrees" / "w").mkdir(parents=True)
    (repo / ".git" / "worktrees" / "w" / "commondir").write_text("../..\n")
    chown_tree(repo)
    before = snapshot(repo / ".git" / "modules"), snapshot(repo / ".git" / "worktrees")
    with runner(repo) as r:
        for command in ("echo '[core] fsmonitor = touch PWNED' >> .git/modules/sub/config",
                        "printf '%s' x > .git/modules/sub/hooks/post-checkout",
                        "echo ../../../evil > .git/worktrees/w/commondir",
                        "mv .git/modules .git/m2", "mv .git/worktrees .git/w2"):
            assert bash(r, command).is_error, command
    assert (snapshot(repo / ".git" / "modules"), snapshot(repo / ".git" / "worktrees")) == before


def test_a_git_file_cannot_be_pointed_elsewhere(tmp_path, no_leaks):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / ".git").write_text("gitdir: /somewhere/else/.git/worktrees/ws\n")
    chown_tree(ws)
    with runner(ws) as r:
        assert bash(r, "mkdir -p evil && echo 'gitdir: evil' > .git").is_error
        assert bash(r, "mv .git .git_old").is_error
    assert (ws / ".git").read_text() == "gitdir: /somewhere/else/.git/worktrees/ws\n"


def test_git_in_the_sandbox_still_commits(repo, no_leaks):
    with runner(repo) as r:
        res = bash(r, "echo new > new.txt && git add new.txt && git -c user.name=a -c user.email=a@b commit -qm "
                      "'in the sandbox' && git log --oneline | wc -l")
        assert not res.is_error and res.content.strip() == "2", res.content
        assert not r.call("write", {"path": "tool.txt", "content": "x\n"}).is_error
        assert not r.call("git_add", {"files": ["tool.txt"]}).is_error
        res = r.call("git_commit", {"message": "by the git tool"})
        assert not res.is_error, res.content
    log = host_git(repo, "log", "--format=%s").stdout.split("\n")
    assert log[:3] == ["by the git tool", "in the sandbox", "first"]


def test_a_missing_hooks_folder_is_made_and_protected(repo, no_leaks):
    import shutil

    shutil.rmtree(repo / ".git" / "hooks")
    with runner(repo) as r:
        assert bash(r, "printf '#!/bin/sh\\ntouch PWNED\\n' > .git/hooks/pre-commit && chmod +x "
                       ".git/hooks/pre-commit").is_error
    assert (repo / ".git" / "hooks").is_dir() and os.stat(repo / ".git" / "hooks").st_uid == 1000
    the_host_git_runs_nothing(repo)


# -- case 6: protected paths and their ancestors stay where they are ---------------------------------
@pytest.fixture
def project(tmp_path) -> Path:
    ws = tmp_path / "ws"
    (ws / "src" / "config").mkdir(parents=True)
    (ws / "src" / "config" / "settings").write_text("safe = true\n")
    (ws / "src" / "app.py").write_text("print('hi')\n")
    chown_tree(ws)
    return ws


@pytest.mark.parametrize("command", [
    "mv src src_x && mkdir -p src/config && echo 'safe = false' > src/config/settings",
    "mv src/config src/config_x && mkdir src/config && echo 'safe = false' > src/config/settings",
    "rm -rf src; mkdir -p src/config && echo 'safe = false' > src/config/settings",
])
def test_renaming_an_ancestor_does_not_escape_protection(project, no_leaks, command):
    with runner(project, protect=["src/config"]) as r:
        assert bash(r, command).is_error
        assert not bash(r, "echo more > src/other.py").is_error  # the rest of src stays writable
    assert (project / "src" / "config" / "settings").read_text() == "safe = true\n"
    assert not (project / "src_x").exists() and not (project / "src" / "config_x").exists()


def test_a_missing_protected_path_is_made_and_read_only(project, no_leaks):
    with runner(project, protect=["secrets/keys"]) as r:
        assert bash(r, "mkdir -p secrets/keys; echo leaked > secrets/keys/k").is_error
        assert bash(r, "mv secrets s2").is_error
    made = project / "secrets" / "keys"
    assert made.is_dir() and not made.is_symlink() and list(made.iterdir()) == []
    assert os.stat(made).st_uid == 1000 and os.stat(project / "secrets").st_uid == 1000


def test_a_protected_path_through_a_link_is_refused(project, tmp_path, no_leaks):
    (project / "real").mkdir()
    (project / "cfg").symlink_to("real")
    (project / "out").symlink_to(tmp_path)
    for rel in ("cfg", "out/secrets"):
        with pytest.raises(RunnerError, match="symbolic link"):
            runner(project, protect=[rel])
    assert not (tmp_path / "secrets").exists()


def test_pins_keep_a_read_only_workspace_read_only(project, no_leaks):
    with runner(project, protect=["src/config"], overrides={"sandbox.workspace": "ro"}) as r:
        assert bash(r, "echo x > src/new.py").is_error
    assert not (project / "src" / "new.py").exists()


def _tool(folder: Path, name: str, text: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text)
    (folder / name).chmod(0o755)


def test_an_approved_tool_cannot_be_swapped_by_renaming_its_folder(project, no_leaks):
    _tool(project / ".runner" / "tools", "deploy", "#!/bin/sh\necho deploying\n")
    chown_tree(project)
    with runner(project) as r:
        for command in ("mv .runner .runner_x && mkdir -p .runner/tools && printf '#!/bin/sh\\necho pwned\\n' > "
                        ".runner/tools/deploy", "mv .runner/tools .runner/t2", "rm -rf .runner"):
            assert bash(r, command).is_error, command
    assert (project / ".runner" / "tools" / "deploy").read_text() == "#!/bin/sh\necho deploying\n"


def test_write_cannot_make_a_project_tool_folder(project, no_leaks):
    with runner(project, overrides={"features.bash": False}) as r:
        for path in (".runner/tools/x", ".acai/tools/x.sh"):
            res = r.call("write", {"path": path, "content": "#!/bin/sh\n# TOOL_ACTION\necho pwned\n"})
            assert res.is_error and "protected" in res.content, res.content
    assert not (project / ".runner").exists() and not (project / ".acai").exists()


# -- case 8: the controller reads tool folders without following or blocking -------------------------
class FifoWatch:
    """A FIFO whose writer end waits in a thread: it gets through only when someone opens the
    FIFO for reading. Then it writes what would make a tool of it and closes (no one hangs)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        os.mkfifo(path)
        self.opened = threading.Event()
        self.releasing = False
        self.thread = threading.Thread(target=self._write, daemon=True)
        self.thread.start()

    def _write(self) -> None:
        fd = os.open(self.path, os.O_WRONLY)
        if not self.releasing:
            self.opened.set()
        try:
            os.write(fd, b"#!/bin/sh\n# TOOL_ACTION\n")
        except OSError:
            pass
        os.close(fd)

    def release(self) -> None:
        self.releasing = True
        fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        self.thread.join()
        os.close(fd)


@pytest.mark.parametrize("where", ["link-out", "in-folder"])
def test_the_controller_never_opens_a_fifo_in_a_tool_folder(project, tmp_path, where):
    (project / "tools").mkdir()
    if where == "link-out":
        watch = FifoWatch(tmp_path / "kmsg")
        (project / "tools" / "x").symlink_to(watch.path)
    else:
        watch = FifoWatch(project / "tools" / "x")
    try:
        r = runner(project)  # classifies the workspace's tool folders on the controller
        r.close()
        assert not watch.opened.is_set(), "the controller opened a FIFO of the workspace"
    finally:
        watch.release()


class OpenWatch:
    """inotify on one host file: whether anyone opened it (IN_OPEN), read without blocking."""

    IN_OPEN, IN_NONBLOCK = 0x20, 0o4000

    def __init__(self, path: Path) -> None:
        import ctypes

        self.libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self.libc.inotify_init1(self.IN_NONBLOCK)
        assert self.fd >= 0 and self.libc.inotify_add_watch(self.fd, str(path).encode(), self.IN_OPEN) >= 0

    def opened(self) -> bool:
        try:
            return bool(os.read(self.fd, 4096))
        except BlockingIOError:
            return False

    def close(self) -> None:
        os.close(self.fd)


def test_the_controller_never_opens_a_file_through_a_workspace_link(project, tmp_path):
    """tools/x -> /proc/kmsg hung every later run; any host file behind a link is the same hole
    (a regular file that blocks, or one whose content the controller's choices reveal)."""
    target = tmp_path / "host-file"
    target.write_text("#!/bin/sh\n# TOOL_ACTION\n")
    target.chmod(0o755)
    (project / "tools").mkdir()
    (project / "tools" / "x").symlink_to(target)
    watch = OpenWatch(target)
    try:
        Runner(executor="docker", workspace=project, preset="all").close()
        assert not watch.opened(), "the controller opened a host file through a link in the workspace"
    finally:
        watch.close()


def test_classifying_tools_is_no_oracle_on_host_files(tmp_path):
    seen = []
    for content in ("#!/bin/sh\n# TOOL_ACTION\n", "just text\n"):
        base = tmp_path / str(len(seen))
        (base / "outside").mkdir(parents=True)
        (base / "outside" / "secret").write_text(content)
        (base / "ws" / "tools").mkdir(parents=True)
        (base / "ws" / "tools" / "x").symlink_to(base / "outside" / "secret")
        r = runner(base / "ws")
        seen.append(r.protected)
        r.close()
    assert seen[0] == seen[1], "what the controller protects depends on a host file's content"


# -- case 15: any workspace shape is an answer, never a crash -----------------------------------------
def _shape(ws: Path, name: str, shape: str) -> None:
    p = ws / name
    p.parent.mkdir(parents=True, exist_ok=True)
    if shape == "loop":
        p.symlink_to(p.name)
    elif shape == "chain":
        for i in range(60):
            p.parent.joinpath(f"{p.name}{i}").symlink_to(f"{p.name}{i + 1}")
        p.symlink_to(f"{p.name}0")
    elif shape == "dangling":
        p.symlink_to("/nowhere/at/all")
    elif shape == "fifo":
        os.mkfifo(p)
    elif shape == "socket":
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(p))
        s.close()


@pytest.mark.parametrize("shape", ["loop", "chain", "dangling", "fifo", "socket"])
@pytest.mark.parametrize("name", ["tools", ".runner/tools", ".acai", "tools/x"])
def test_tool_folders_of_any_shape_never_stop_the_runner(project, no_leaks, name, shape):
    _shape(project, name, shape)
    chown_tree(project)
    with runner(project) as r:
        assert r.call("read", {"path": "src/app.py"}).content.strip().endswith("print('hi')")
        r.custom_errors()  # a skipped-tool note at most


@pytest.mark.parametrize("shape", ["loop", "chain", "dangling", "fifo", "socket"])
@pytest.mark.parametrize("tool", ["write", "edit"])
def test_writing_tools_on_any_shape_answer_with_a_tool_error(project, no_leaks, shape, tool):
    with runner(project, protect=["src/config"]) as r:
        assert not bash(r, {"loop": "ln -s x x", "dangling": "ln -s /nowhere/at/all x", "fifo": "mkfifo x",
                            "socket": "python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind(\"x\")'",
                            "chain": "for i in $(seq 0 59); do ln -s x$((i+1)) x$i; done; ln -s x0 x; "
                                     "ln -s src/config/settings x60"}[shape]).is_error
        args = {"path": "x", "content": "y\n"} if tool == "write" else {"path": "x", "old_string": "a", "new_string": "b"}
        res = r.call(tool, args)  # a result, never an exception; a link is never written through
        assert res.is_error or (shape in ("fifo", "socket") and tool == "write"), res.content
        assert r.call("read", {"path": "src/app.py"}).content.strip().endswith("print('hi')")
    assert (project / "src" / "config" / "settings").read_text() == "safe = true\n"


def _cli(*args: str, input: bytes = b"") -> subprocess.CompletedProcess:
    import sys

    return subprocess.run([sys.executable, "-m", "runner", *args], input=input, capture_output=True, timeout=600)


def test_the_commands_of_the_issue_never_crash(project, no_leaks):
    """`ln -s loop loop` then `write loop` ended `runner session`; `ln -s tools tools` made every
    later `runner call` on that workspace fail."""
    import json

    calls = [{"id": 1, "tool": "bash", "args": {"command": "ln -s loop loop && ln -s tools tools"}},
             {"id": 2, "tool": "write", "args": {"path": "loop", "content": "x"}},
             {"id": 3, "tool": "read", "args": {"path": "src/app.py"}}]
    p = _cli("session", "-w", str(project), "--executor", "docker",
             input="".join(json.dumps(c) + "\n" for c in calls).encode())
    assert p.returncode == 0, p.stderr.decode()
    answers = [json.loads(line) for line in p.stdout.decode().splitlines()]
    assert [a["id"] for a in answers] == [1, 2, 3] and answers[1]["is_error"] and not answers[2]["is_error"], answers
    assert (project / "tools").is_symlink()
    p = _cli("call", "read", '{"path": "src/app.py"}', "-w", str(project), "--executor", "docker")
    assert p.returncode == 0 and "print('hi')" in p.stdout.decode(), p.stderr.decode()


@pytest.fixture
def gvisor(docker_client):
    if "runsc" not in (docker_client.info().get("Runtimes") or {}):
        pytest.skip("runsc (gVisor) is not configured on this engine; `runner doctor` says how")
    return "runsc"


def test_pins_hold_under_gvisor(repo, no_leaks, gvisor):
    (repo / "src" / "config").mkdir(parents=True)
    chown_tree(repo)
    with runner(repo, protect=["src/config"], runtime=gvisor) as r:
        for command in ("mv src src_x && mkdir -p src/config && echo pwned > src/config/x",
                        "mv .git .git_old && cp -r .git_old .git && printf '#!/bin/sh\\ntouch PWNED\\n' > "
                        ".git/hooks/pre-commit && chmod +x .git/hooks/pre-commit",
                        "echo '[core] fsmonitor = touch PWNED' >> .git/config"):
            assert bash(r, command).is_error, command
        assert not bash(r, "echo ok > src/fine && git add src/fine && git -c user.name=a -c user.email=b commit "
                           "-qm gvisor").is_error
    assert not (repo / "src_x").exists() and not (repo / ".git_old").exists()
    assert list((repo / "src" / "config").iterdir()) == []
    the_host_git_runs_nothing(repo)


@pytest.mark.parametrize("given", ["absolute", "relative", "link-into"])
def test_a_secret_file_in_the_workspace_is_refused(project, tmp_path, monkeypatch, given):
    """An earlier session replaced .secrets/token by a link to a host file: the next session
    would have got that file's content as a secret in its environment."""
    from runner.policy.model import SecretUnavailable

    (tmp_path / "host-key").write_text("PRIVATE KEY of the user\n")
    (project / ".secrets").mkdir()
    (project / ".secrets" / "token").symlink_to(tmp_path / "host-key")
    monkeypatch.chdir(project)
    source = {"absolute": str(project / ".secrets" / "token"), "relative": ".secrets/token"}.get(given)
    if given == "link-into":
        (tmp_path / "via").symlink_to(project / ".secrets")
        source = str(tmp_path / "via" / "token")
    with pytest.raises(SecretUnavailable, match="lies in the workspace"):
        runner(project, overrides={"secrets": {"TOKEN": {"from_file": source}}})
