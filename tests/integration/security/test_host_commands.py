"""Host commands against a hostile workspace, end to end: a real docker sandbox, a real sshd on
loopback, real git on the host pushing to and pulling from a bare repository over ssh.

Whatever the sandbox plants (git options, repository configuration, hooks, symlinks), a routed
command runs no program of its choosing on the host, reads and writes nothing outside the
workspace, and gets a clear error instead. A canary file the planted program would create
proves it never ran.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from runner import Runner
from runner.policy import load
from tests.integration.ssh.sshd import make_sshd

VENV_BIN = Path(sys.executable).parent  # `runner host-shell` on the host (this machine)
RULES = [{"name": "git", "args_prefix": [sub]} for sub in ("push", "pull", "fetch", "status")]


pytestmark = [pytest.mark.docker, pytest.mark.sshd]  # tools in a docker sandbox, host commands over a real sshd


def git(*args, cwd=None, env=None, check=True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=check, capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    """The host: an sshd that accepts runner's key (`client`) and git's own ssh transport
    (`other`, for the bare remotes), and the host user's git configuration."""
    d = tmp_path_factory.mktemp("host")
    server = make_sshd(d / "sshd")
    keys = d / "sshd"
    (keys / "authorized_keys").write_text((keys / "client.pub").read_text() + (keys / "other.pub").read_text())
    gitconfig = d / "gitconfig"
    gitconfig.write_text("[user]\n\tname = Host User\n\temail = host@example.invalid\n[init]\n\tdefaultBranch = main\n"
                         "[safe]\n\tdirectory = *\n")
    ssh = (f"ssh -i {keys}/other -o IdentitiesOnly=yes -o UserKnownHostsFile={keys}/known_hosts "
           "-o StrictHostKeyChecking=yes -o BatchMode=yes")
    env = {"PATH": f"{VENV_BIN}:/usr/bin:/bin", "GIT_CONFIG_GLOBAL": str(gitconfig), "GIT_SSH_COMMAND": ssh}
    server.start()
    try:
        yield SimpleNamespace(sshd=server, dir=d, env=env, test_env={**os.environ, **env})
    finally:
        server.stop()


def policy(host, rules=RULES, **target):
    return load("default").effective(overrides={
        "host_commands": rules, "tools.allow": ["exec"], "limits.timeout": 60,
        "host": {"host": "127.0.0.1", "port": host.sshd.port, "user": "root", "key_file": host.sshd.client_key,
                 "known_hosts": host.sshd.known_hosts, "env": host.env, **target}})


@pytest.fixture(scope="module")
def hostile(host, tmp_path_factory):
    """(runner, workspace, host): one docker sandbox over a workspace that holds one repository
    per test, each with an `origin` on the host reached over ssh."""
    ws = tmp_path_factory.mktemp("ws")
    with Runner(executor="docker", workspace=ws, policy=policy(host)) as r:
        yield r, ws, host


class Repo(SimpleNamespace):
    def config(self, key, value):
        git("config", "--file", str(self.path / ".git" / "config"), key, value)


@pytest.fixture
def repo(hostile, request):
    """A repository in the workspace with one commit pushed to its bare origin, an evil program
    and the canary it would create."""
    r, ws, host = hostile
    name = "repo-" + "".join(c if c.isalnum() else "-" for c in request.node.name)[:80]
    path = ws / name
    env = host.test_env
    git("init", "-q", "-b", "main", str(path), env=env)
    (path / "a.txt").write_text("one\n")
    git("add", "a.txt", cwd=path, env=env)
    git("commit", "-q", "-m", "one", cwd=path, env=env)
    bare = host.dir / f"{name}.git"
    git("init", "-q", "--bare", str(bare), env=env)
    git("push", "-q", str(bare), "main", cwd=path, env=env)
    url = f"ssh://root@127.0.0.1:{host.sshd.port}{bare}"
    git("remote", "add", "origin", url, cwd=path, env=env)
    git("config", "branch.main.remote", "origin", cwd=path, env=env)
    git("config", "branch.main.merge", "refs/heads/main", cwd=path, env=env)
    canary = host.dir / f"{name}.canary"
    evil = path / "evil.sh"
    evil.write_text(f"#!/bin/sh\ntouch {canary}\n")
    evil.chmod(0o755)
    call = lambda command, **kw: r.call("bash", {"command": command, "cwd": name, **kw})  # noqa: E731
    yield Repo(r=r, ws=ws, host=host, name=name, path=path, bare=bare, url=url, canary=canary, evil=str(evil),
               call=call, env=env)


def refused(res, *says):
    assert res.is_error, f"expected a refusal, got: {res.text[:600]}"
    for s in says:
        assert s in res.text, res.text[:1000]
    return res.text


# -- 1. options by allowlist, not by deny list (git accepts unique abbreviations) -----------------
@pytest.mark.parametrize("command", [
    "git push --exe={evil} origin HEAD",
    "git push --exec={evil} origin HEAD",
    "git push --receive={evil} origin HEAD",
    "git push --receive-p {evil} origin HEAD",
    "git push origin HEAD --exe={evil}",  # after the positional arguments: git permutes
    "git push origin --rec={evil} HEAD",
    "git pull --upload-p={evil} origin main",
    "git pull --upl {evil}",
    "git fetch --upload-pack={evil}",
    "git fetch --upload={evil} origin",
    "git push -c core.sshCommand={evil} origin HEAD",
    "git push --end-of-options --exe={evil} origin HEAD",
])
def test_program_options_in_any_spelling_never_run(repo, command):
    res = repo.call(command.format(evil=repo.evil))
    assert not repo.canary.exists(), "the planted program RAN on the host"
    refused(res, "not run on the host", "is not allowed for git")


@pytest.mark.parametrize("command", [
    "git -c core.fsmonitor={evil} status",
    "git --config-env=core.fsmonitor=X status",
    "git --exec-path=/tmp status",
    "git -C / status",
])
def test_global_options_before_the_subcommand_are_refused(repo, command):
    res = repo.call(command.format(evil=repo.evil))
    assert not repo.canary.exists(), "the planted program RAN on the host"
    refused(res, "not run on the host", "not allowed")


def test_allowed_options_still_work(repo):
    (repo.path / "b.txt").write_text("two\n")
    git("add", "b.txt", cwd=repo.path, env=repo.env)
    git("commit", "-q", "-m", "two", cwd=repo.path, env=repo.env)
    res = repo.call("git push --porcelain -u origin HEAD")
    assert not res.is_error and res.meta["ran_on"] == "host", res.text
    assert git("rev-parse", "main", cwd=repo.bare).stdout == git("rev-parse", "HEAD", cwd=repo.path).stdout
    res = repo.call("git status --short --branch")
    assert not res.is_error and res.text.startswith("## main...origin/main"), res.text


# -- 2. repository configuration that runs programs: refused by key, whatever git would do -----------
# (key, value, command); {evil} is the planted program, {url} origin, {ws} the workspace.
CONFIG = [
    ("core.fsmonitor", "{evil}", "git status"),
    ("core.hooksPath", "{hooks}", "git push origin HEAD"),
    ("core.sshCommand", "{evil}", "git push origin HEAD"),
    ("core.pager", "{evil}", "git status"),
    ("pager.status", "{evil}", "git status"),
    ("core.editor", "{evil}", "git pull --no-rebase"),
    ("sequence.editor", "{evil}", "git pull --rebase"),
    ("core.askPass", "{evil}", "git push origin HEAD"),
    ("core.gitProxy", "{evil}", "git status"),
    ("core.worktree", "/", "git status"),
    ("core.attributesFile", "/etc/passwd", "git status"),
    ("core.alternateRefsCommand", "{evil}", "git push origin HEAD"),
    ("diff.external", "{evil}", "git status"),
    ("diff.evil.command", "{evil}", "git status"),
    ("diff.evil.textconv", "{evil}", "git status"),
    ("merge.evil.driver", "{evil}", "git pull --no-rebase"),
    ("filter.evil.clean", "{evil}", "git status"),
    ("filter.evil.smudge", "{evil}", "git pull"),
    ("filter.evil.process", "{evil}", "git status"),
    ("credential.helper", "{evil}", "git push origin HEAD"),
    ("credential.https://example.invalid.helper", "{evil}", "git push origin HEAD"),
    ("alias.status", "!{evil}", "git status"),
    ("include.path", "{include}", "git status"),
    ("includeIf.gitdir:/.path", "{include}", "git status"),
    ("protocol.ext.allow", "always", "git push origin HEAD"),
    ("remote.origin.uploadpack", "{evil}", "git pull"),
    ("remote.origin.receivepack", "{evil}", "git push origin HEAD"),
    ("remote.origin.vcs", "evil", "git push origin HEAD"),
    ("remote.origin.proxy", "http://127.0.0.1:9", "git push origin HEAD"),
    ("url.ext::{evil} x.insteadOf", "{url}", "git push origin HEAD"),
    ("gpg.program", "{evil}", "git push origin HEAD"),
    ("gpg.ssh.program", "{evil}", "git push origin HEAD"),
    ("gpg.x509.program", "{evil}", "git push origin HEAD"),
    ("push.gpgSign", "true", "git push origin HEAD"),
    ("commit.gpgSign", "true", "git pull --no-rebase"),
    ("uploadpack.packObjectsHook", "{evil}", "git pull"),
    ("submodule.x.update", "!{evil}", "git pull"),
    ("extensions.worktreeConfig", "true", "git status"),
    ("difftool.evil.cmd", "{evil}", "git status"),
    ("mergetool.evil.cmd", "{evil}", "git pull"),
    ("http.cookieFile", "/etc/shadow", "git push origin HEAD"),
    ("http.sslKey", "/etc/ssh/ssh_host_ed25519_key", "git push origin HEAD"),
    ("receive.procReceiveRefs", "refs", "git push origin HEAD"),
    ("fetch.recurseSubmodules", "true", "git pull"),
    ("sendemail.smtpServer", "{evil}", "git status"),
]


@pytest.mark.parametrize("key, value, command", CONFIG, ids=[c[0] for c in CONFIG])
def test_repository_config_that_names_a_program_is_refused(repo, key, value, command):
    hooks = repo.path / "myhooks"
    hooks.mkdir()
    for hook in ("pre-push", "post-merge", "reference-transaction"):
        (hooks / hook).symlink_to(repo.evil)
    include = repo.path / "inc.conf"
    include.write_text(f"[core]\n\tfsmonitor = {repo.evil}\n")
    (repo.path / ".gitattributes").write_text("*.txt filter=evil diff=evil merge=evil\n")
    (repo.path / "a.txt").write_text("changed in the worktree\n")
    fmt = dict(evil=repo.evil, hooks=hooks, include=include, url=repo.url)
    repo.config(key.format(**fmt), value.format(**fmt))
    if key == "extensions.worktreeConfig":  # then config.worktree is read as well
        repo.config("core.repositoryFormatVersion", "1")
        (repo.path / ".git" / "config.worktree").write_text(f"[core]\n\tfsmonitor = {repo.evil}\n")
    res = repo.call(command)
    assert not repo.canary.exists(), "the planted program RAN on the host"
    text = refused(res, "runner host-shell: refused")
    parts = key.format(**fmt).split(".")
    listed = ".".join([parts[0].lower(), *parts[1:-1], parts[-1].lower()])  # as git lists it
    assert listed in text or "config.worktree exists" in text, text
    assert not repo.canary.exists(), "the planted program RAN on the host"


def test_the_repository_config_is_never_read_through_a_link_or_a_fifo(repo):
    outside = repo.host.dir / f"{repo.name}-outside.conf"
    outside.write_text(f"[core]\n\tfsmonitor = {repo.evil}\n")
    cfg = repo.path / ".git" / "config"
    cfg.unlink()
    cfg.symlink_to(outside)
    refused(repo.call("git status"), "runner host-shell: refused", "config is a symlink")
    cfg.unlink()
    os.mkfifo(cfg)
    refused(repo.call("git status"), "runner host-shell: refused", "config is neither a file nor a directory")
    cfg.unlink()
    cfg.write_text("[core]\n\tbare = false\n" + "# padding\n" * 40_000)
    refused(repo.call("git status"), "runner host-shell: refused", "larger than")
    assert not repo.canary.exists(), "the planted program RAN on the host"


def test_default_hooks_never_run_and_push_still_works(repo):
    """No configuration at all: the sandbox can rename .git and plant .git/hooks/pre-push; the
    push goes through and no hook runs."""
    (repo.path / "b.txt").write_text("two\n")
    git("add", "b.txt", cwd=repo.path, env=repo.env)
    git("commit", "-q", "-m", "two", cwd=repo.path, env=repo.env)
    for hook in ("pre-push", "reference-transaction", "post-merge", "post-checkout"):
        (repo.path / ".git" / "hooks" / hook).write_text(f"#!/bin/sh\ntouch {repo.canary}\n")
        (repo.path / ".git" / "hooks" / hook).chmod(0o755)
    res = repo.call("git push origin HEAD")
    assert not res.is_error, res.text
    assert git("rev-parse", "main", cwd=repo.bare).stdout == git("rev-parse", "HEAD", cwd=repo.path).stdout
    other = repo.host.dir / f"{repo.name}-clone"  # someone else pushes; the pull merges it
    git("clone", "-q", str(repo.bare), str(other), env=repo.env)
    (other / "c.txt").write_text("three\n")
    git("add", "c.txt", cwd=other, env=repo.env)
    git("commit", "-q", "-m", "three", cwd=other, env=repo.env)
    git("push", "-q", "origin", "main", cwd=other, env=repo.env)
    res = repo.call("git pull --no-rebase")
    assert not res.is_error, res.text
    assert (repo.path / "c.txt").read_text() == "three\n"
    assert not repo.canary.exists(), "the planted program RAN on the host"


def test_hooks_planted_by_bash_in_the_sandbox_never_run_on_the_host(repo):
    """The issue's attack, from bash: rename .git away from its protected hooks, plant a hook
    and an fsmonitor; the routed git status and push run neither."""
    c = f"/workspace/{repo.name}"
    res = repo.r.call("bash", {"command": f"cd {c} && mv .git .git_old && mkdir .git && cp -a .git_old/. .git/ && "
                                         f"printf '#!/bin/sh\\ntouch {repo.canary}\\n' > .git/hooks/pre-push && "
                                         "chmod +x .git/hooks/pre-push && echo planted"})
    assert res.text.strip() == "planted", res.text
    res = repo.call("git push origin HEAD")
    assert not repo.canary.exists(), "the planted program RAN on the host"
    assert not res.is_error, res.text
    res = repo.r.call("bash", {"command": f"cd {c} && git config core.fsmonitor {repo.evil} && echo planted"})
    assert res.text.strip() == "planted", res.text
    res = repo.call("git status")
    assert not repo.canary.exists(), "the planted program RAN on the host"
    refused(res, "runner host-shell: refused", "core.fsmonitor")


def test_remotes_on_this_host_are_refused(repo):
    """A local path or file:// remote writes into (and runs the hooks of) a repository outside
    the workspace, with the host's permissions."""
    outside = repo.host.dir / f"{repo.name}-outside.git"
    git("init", "-q", "--bare", str(outside), env=repo.env)
    for url in (str(outside), f"file://{outside}"):
        refused(repo.call(f"git push {url} HEAD:refs/heads/planted"), "exit code")
    repo.config("remote.origin.url", str(outside))
    refused(repo.call("git push origin HEAD:refs/heads/planted"), "not allowed")
    assert git("for-each-ref", cwd=outside).stdout == ""
    refused(repo.call(f"git pull ext::{repo.evil}"), "exit code")
    assert not repo.canary.exists(), "the planted program RAN on the host"


@pytest.mark.parametrize("inside", ["FETCH_HEAD", "MERGE_MSG", "logs/HEAD", "refs/remotes", "objects/pack"])
def test_links_inside_the_git_directory_are_refused(repo, inside):
    """git writes FETCH_HEAD, MERGE_MSG, reflogs and refs through a symlink: a pull would
    truncate and rewrite a host file outside the workspace."""
    victim = repo.host.dir / f"{repo.name}-victim"
    victim.mkdir()
    (victim / "file").write_text("host file\n")
    link = repo.path / ".git" / inside
    subprocess.run(["rm", "-rf", str(link)], check=True)
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(victim if inside in ("refs/remotes", "objects/pack") else victim / "file")
    res = repo.call("git pull")
    assert (victim / "file").read_text() == "host file\n" and os.listdir(victim) == ["file"]
    refused(res, "runner host-shell: refused", f".git/{inside} is a symlink")


@pytest.mark.parametrize("shape", ["gitdir symlink", "gitfile", "alternates", "commondir"])
def test_git_directories_that_lead_elsewhere_are_refused(repo, shape):
    outside = repo.host.dir / f"{repo.name}-outside"
    git("init", "-q", str(outside), env=repo.env)
    (outside / "secret.txt").write_text("host secret\n")
    git("add", ".", cwd=outside, env=repo.env)
    git("commit", "-q", "-m", "secret", cwd=outside, env=repo.env)
    dot = repo.path / ".git"
    if shape == "gitdir symlink":
        subprocess.run(["rm", "-rf", str(dot)], check=True)
        dot.symlink_to(outside / ".git")
        says = ".git is a symlink"
    elif shape == "gitfile":
        subprocess.run(["rm", "-rf", str(dot)], check=True)
        dot.write_text(f"gitdir: {outside}/.git\n")
        says = "is not a directory"
    elif shape == "alternates":
        (dot / "objects" / "info" / "alternates").write_text(f"{outside}/.git/objects\n")
        says = "alternates exists"
    else:
        (dot / "commondir").write_text(f"{outside}/.git\n")
        says = "commondir exists"
    refused(repo.call("git status"), "runner host-shell: refused", says)
    refused(repo.call("git push origin HEAD"), "runner host-shell: refused", says)
    assert git("rev-parse", "main", cwd=repo.bare).stdout != git("rev-parse", "HEAD", cwd=outside).stdout


def _nested(repo, sub: str) -> Path:
    """A repository at SUB inside the workspace's repository, committed there as a gitlink (what
    bash in the sandbox can do: git init, git add), with a file git would hash through SUB's
    own configuration."""
    path = repo.path / sub
    git("init", "-q", str(path), env=repo.env)
    (path / ".gitattributes").write_text("* filter=x\n")
    (path / "f").write_text("one\n")
    git("add", ".", cwd=path, env=repo.env)
    git("commit", "-q", "-m", "sub", cwd=path, env=repo.env)
    git("add", sub, cwd=repo.path, env=repo.env)  # a gitlink (mode 160000) in the outer index
    git("commit", "-q", "-m", "gitlink", cwd=repo.path, env=repo.env)
    (path / "f").write_text("two\n")  # a change: status asks the nested repository about it
    return path


@pytest.mark.parametrize("shape", ["its own .git", "absorbed into .git/modules", "a gitfile to a host repository",
                                   "nested twice"])
def test_a_nested_repository_never_runs_its_configuration_on_the_host(repo, shape):
    """git status (and gh, and a pull's merge) goes into a submodule the work tree holds and runs
    git there, with the submodule's own configuration: a clean filter the sandbox wrote into it
    ran on the host, though the outer .git/config was clean. A gitfile there sent git into a
    repository of the host's and rewrote its index."""
    outside = repo.host.dir / f"{repo.name}-outside"
    if shape == "nested twice":
        sub = _nested(repo, "a")
        inner = _nested(SimpleNamespace(path=sub, env=repo.env), "b")
        git("config", "filter.x.clean", repo.evil, cwd=inner)
    else:
        sub = _nested(repo, "sub")
        git("config", "filter.x.clean", repo.evil, cwd=sub)
    if shape == "absorbed into .git/modules":
        (repo.path / ".gitmodules").write_text(f"[submodule \"sub\"]\n\tpath = sub\n\turl = {repo.url}\n"
                                               "\tignore = none\n")
        git("submodule", "absorbgitdirs", cwd=repo.path, env=repo.env)
        assert (sub / ".git").is_file() and (repo.path / ".git" / "modules" / "sub" / "config").is_file()
    elif shape == "a gitfile to a host repository":
        git("init", "-q", str(outside), env=repo.env)
        (outside / "f").write_text("host\n")
        git("add", "f", cwd=outside, env=repo.env)
        git("commit", "-q", "-m", "host", cwd=outside, env=repo.env)
        git("config", "filter.x.clean", repo.evil, cwd=outside)
        subprocess.run(["rm", "-rf", str(sub / ".git")], check=True)
        (sub / ".git").write_text(f"gitdir: {outside}/.git\n")
        os.utime(outside / ".git" / "index", (1_000_000_000, 1_000_000_000))
    res = repo.call("git status")
    assert not repo.canary.exists(), "the planted program RAN on the host"
    if shape == "a gitfile to a host repository":
        assert os.stat(outside / ".git" / "index").st_mtime == 1_000_000_000, "git wrote in a host repository"
    refused(res, "runner host-shell: refused", "submodule")


def test_an_untracked_repository_in_the_work_tree_is_not_entered(repo):
    """A repository git does not track (no gitlink) is an untracked directory to status: git never
    runs in it, so it is no reason to refuse."""
    path = repo.path / "loose"
    git("init", "-q", str(path), env=repo.env)
    (path / ".gitattributes").write_text("* filter=x\n")
    (path / "f").write_text("one\n")
    git("config", "filter.x.clean", repo.evil, cwd=path)
    res = repo.call("git status --porcelain")
    assert not res.is_error and "?? loose/" in res.text, res.text
    assert not repo.canary.exists(), "the planted program RAN on the host"


def test_an_index_naming_a_host_file_is_refused(repo):
    """The sandbox writes the index's bytes: an entry named `../../…/secret` (git checks a name when
    it adds it, not when it reads the index) had a routed `git status -v -v` print the lines of a
    host file outside the workspace."""
    from tests.unit.host.test_shell import _rename_in_index

    secret = repo.host.dir / f"{repo.name}-secret"
    secret.write_text("host secret\n")
    blob = git("hash-object", "-w", "a.txt", cwd=repo.path).stdout.strip()
    git("update-index", "--add", "--cacheinfo", f"100644,{blob},placeholder", cwd=repo.path)
    _rename_in_index(repo.path / ".git" / "index", b"placeholder", os.path.relpath(secret, repo.path).encode())
    res = repo.call("git status -v -v")
    assert "host secret" not in res.text, "a host file's lines came back"
    refused(res, "runner host-shell: refused", "a path git never writes there")


def _gitlink_over_loose_repository(repo) -> None:
    """A repository git does not track at sub/, whose filter is the evil program and whose file
    changed, and a commit on the remote that adds a gitlink there (with ignore = none)."""
    loose = repo.path / "sub"
    git("init", "-q", str(loose), env=repo.env)
    (loose / ".gitattributes").write_text("* filter=x\n")
    (loose / "f").write_text("one\n")
    git("add", ".", cwd=loose, env=repo.env)
    git("commit", "-q", "-m", "loose", cwd=loose, env=repo.env)
    (loose / "f").write_text("two\n")
    git("config", "filter.x.clean", repo.evil, cwd=loose)
    other = repo.host.dir / f"{repo.name}-other"
    git("clone", "-q", str(repo.bare), str(other), env=repo.env)
    head = git("rev-parse", "HEAD", cwd=loose).stdout.strip()
    git("update-index", "--add", "--cacheinfo", f"160000,{head},sub", cwd=other, env=repo.env)
    (other / ".gitmodules").write_text('[submodule "sub"]\n\tpath = sub\n\turl = ./sub\n\tignore = none\n')
    git("add", ".gitmodules", cwd=other, env=repo.env)  # ignore = none: wins over diff.ignoreSubmodules
    git("commit", "-q", "-m", "a gitlink", cwd=other, env=repo.env)
    git("push", "-q", "origin", "main", cwd=other, env=repo.env)


def test_a_pull_that_brings_a_gitlink_over_a_loose_repository_runs_nothing_there(repo):
    """The remote's branch adds a gitlink where the work tree holds a repository git did not
    track (and so the check let pass): a pull's autostash then ran status, which entered it and
    ran its filter. --autostash is refused, and the host's own config cannot turn it on."""
    _gitlink_over_loose_repository(repo)
    (repo.path / "a.txt").write_text("a local change, for the stash\n")
    refused(repo.call("git pull --autostash"), "option --autostash is not allowed")  # by the controller, as on the host
    config = Path(repo.host.env["GIT_CONFIG_GLOBAL"])
    kept = config.read_text()
    config.write_text(kept + "[merge]\n\tautoStash = true\n")  # the host user's own setting
    try:
        res = repo.call("git pull --no-rebase")
    finally:
        config.write_text(kept)
    assert not repo.canary.exists(), "the planted program RAN on the host"
    assert not res.is_error or "local changes" in res.text, res.text


def _conflict(repo) -> None:
    """The remote's main and the workspace's main both change a.txt: a pull conflicts."""
    other = repo.host.dir / f"{repo.name}-other"
    git("clone", "-q", str(repo.bare), str(other), env=repo.env)
    (other / "a.txt").write_text("theirs\n")
    git("commit", "-q", "-am", "theirs", cwd=other, env=repo.env)
    git("push", "-q", "origin", "main", cwd=other, env=repo.env)
    (repo.path / "a.txt").write_text("ours\n")
    git("commit", "-q", "-am", "ours", cwd=repo.path, env=repo.env)


def test_a_conflicting_pull_copies_no_host_file_into_the_repository(repo):
    """rerere turns itself on when .git/rr-cache exists and, on a conflict, takes the paths of
    .git/MERGE_RR as they are: a routed pull copied a host file named there into
    .git/rr-cache/ID/postimage, where the sandbox reads it. Refused (state of an operation in
    progress), and rerere is pinned off besides."""
    secret = repo.host.dir / f"{repo.name}-secret"
    secret.write_text("host secret\n")
    _conflict(repo)
    rid = "0123456789abcdef0123456789abcdef01234567"
    (repo.path / ".git" / "rr-cache" / rid).mkdir(parents=True)
    (repo.path / ".git" / "MERGE_RR").write_bytes(f"{rid}\t{secret}\0".encode())
    res = repo.call("git pull --no-rebase")
    copied = repo.path / ".git" / "rr-cache" / rid / "postimage"
    assert not copied.exists() or "host secret" not in copied.read_text(), "a host file was copied in"
    refused(res, "runner host-shell: refused", ".git/MERGE_RR is not what host commands run git with")


def test_no_git_process_outlives_a_routed_fetch(repo):
    """Enough loose objects make a fetch start `git gc --auto`, which detached itself (its own
    session, out of reach of the command's kill) and went on repacking after host-shell returned
    and the sandbox ran again: it then wrote through whatever .git had become."""
    many = repo.path / ".git" / "objects" / "17"
    many.mkdir(exist_ok=True)
    for i in range(40):  # gc --auto estimates the loose objects from the names in objects/17 alone
        (many / f"{i:038x}").write_bytes(b"")
    res = repo.call("git fetch")
    assert "Auto packing" not in res.text, res.text


@pytest.mark.parametrize("state", ["MERGE_AUTOSTASH", "worktrees/x/commondir", "objects/pack/multi-pack-index",
                                   "rebase-merge/git-rebase-todo", "sequencer/todo", "BISECT_START"])
def test_state_of_an_operation_in_progress_is_refused(repo, state):
    """git takes what it finds in .git as its own: a stash that MERGE_AUTOSTASH names was applied
    after a pull's merge whatever autoStash says (and its status entered a loose repository the
    merge had put a gitlink over), a linked worktree's commondir had fetch read another
    repository's refs, a multi-pack-index names packs by any path. Only what a clone keeps is
    taken; the rest is named in the refusal."""
    path = repo.path / ".git" / state
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{repo.host.dir}/elsewhere\n")
    refused(repo.call("git status"), "runner host-shell: refused", f".git/{state.split('/')[0]}",
            "is not what host commands run git with")
    assert not repo.canary.exists()


def test_a_planted_autostash_is_never_applied(repo):
    """The same chain as the pull's --autostash (a gitlink brought over a loose repository, then a
    status in it), started by a stash the sandbox names in .git/MERGE_AUTOSTASH: git applied it
    whatever merge.autoStash said."""
    _gitlink_over_loose_repository(repo)
    (repo.path / "a.txt").write_text("a change, stashed by the sandbox\n")
    stash = git("stash", "create", cwd=repo.path, env=repo.env).stdout.strip()
    git("checkout", "a.txt", cwd=repo.path, env=repo.env)
    (repo.path / ".git" / "MERGE_AUTOSTASH").write_text(stash + "\n")
    res = repo.call("git pull --no-rebase")
    assert not repo.canary.exists(), "the planted program RAN on the host"
    refused(res, "runner host-shell: refused", ".git/MERGE_AUTOSTASH")


def test_a_reftable_repository_is_refused(repo):
    """A reftable's tables.list names its tables by any path (git 2.45 on opened, compacted and
    deleted a host repository's table through `../`): the files backend only."""
    repo.config("extensions.refStorage", "reftable")
    refused(repo.call("git status"), "runner host-shell: refused", "extensions.refstorage")


def test_an_option_after_a_double_dash_is_still_refused(repo):
    """`git pull` drops the `--` and runs `git fetch origin --upload-pack=…`: the allowlist stopped
    at `--`, and the sandbox's program ran on the ssh server the host's key reaches (here, the
    host)."""
    wrapper = repo.path / "evil-upload-pack"
    wrapper.write_text(f'#!/bin/sh\ntouch {repo.canary}\nexec git-upload-pack "$@"\n')
    wrapper.chmod(0o755)
    res = repo.call(f"git pull origin -- --upload-pack={wrapper}")
    assert not repo.canary.exists(), "the planted program RAN on the host"
    refused(res, "--upload-pack=", "starts with '-'")


def test_a_remote_named_like_an_option_is_refused(repo):
    """`git fetch --all` runs `git fetch <name>` for each remote, without `--`: a remote named
    `--upload-pack=…` ran the sandbox's program on the ssh server."""
    repo.config(f"remote.--upload-pack={repo.evil}; git-upload-pack.url", repo.url)
    res = repo.call("git fetch --all")
    assert not repo.canary.exists(), "the planted program RAN on the host"
    refused(res, "runner host-shell: refused", "may not start with '-'")


def test_a_link_among_the_objects_is_refused(repo):
    """git freshens an object it already has by touching its file: a link planted under the name
    of a blob the remote holds had a fetch set the mtime of the host file it names. A pack named
    by a link would have a push send another repository's objects."""
    other = repo.host.dir / f"{repo.name}-other"
    git("clone", "-q", str(repo.bare), str(other), env=repo.env)
    (other / "new.txt").write_text("a blob the fetch will bring\n")
    git("add", "new.txt", cwd=other, env=repo.env)
    git("commit", "-q", "-m", "new", cwd=other, env=repo.env)
    git("push", "-q", "origin", "main", cwd=other, env=repo.env)
    blob = git("rev-parse", "HEAD:new.txt", cwd=other).stdout.strip()
    victim = repo.host.dir / f"{repo.name}-victim"
    victim.write_text("host file\n")
    os.utime(victim, (1_000_000_000, 1_000_000_000))
    link = repo.path / ".git" / "objects" / blob[:2] / blob[2:]
    link.parent.mkdir(exist_ok=True)
    link.symlink_to(victim)
    res = repo.call("git fetch")
    assert os.stat(victim).st_mtime == 1_000_000_000 and victim.read_text() == "host file\n"
    refused(res, "runner host-shell: refused", f".git/objects/{blob[:2]}/{blob[2:]} is a symlink")
    link.unlink()
    pack = repo.path / ".git" / "objects" / "pack" / "pack-0000000000000000000000000000000000000000.pack"
    pack.parent.mkdir(exist_ok=True)
    pack.symlink_to(victim)
    refused(repo.call("git push origin HEAD"), "runner host-shell: refused", "objects/pack/pack-0000")


# -- 3. the working directory is resolved on the host: no symlink, no `..` ---------------------------
@pytest.mark.parametrize("shape", ["link", "link in the middle", "link to a parent", "absolute"])
def test_a_working_directory_through_a_symlink_never_leaves_the_workspace(repo, shape):
    outside = repo.host.dir / f"{repo.name}-hostrepo"
    git("init", "-q", str(outside / "deep"), env=repo.env)
    git("commit", "-q", "--allow-empty", "-m", "host", cwd=outside / "deep", env=repo.env)
    git("config", "core.fsmonitor", repo.evil, cwd=outside / "deep")  # it would run there, unchecked
    target, cwd = {"link": (outside / "deep", "pr"), "link in the middle": (outside, "pr/deep"),
                   "link to a parent": (repo.ws.parent, f"pr/{outside.parent.name}/{outside.name}/deep"),
                   "absolute": (outside / "deep", "/workspace/pr")}[shape]
    res = repo.r.call("bash", {"command": f"ln -s {target} pr && echo linked", "cwd": repo.name})
    assert res.text.strip() == "linked", res.text
    cwd = cwd if cwd.startswith("/") else f"{repo.name}/{cwd}"
    cwd = cwd.replace("/workspace/pr", f"/workspace/{repo.name}/pr")
    for command in ("git status", "git push origin HEAD", "git pull"):
        refused(repo.r.call("bash", {"command": command, "cwd": cwd}), "runner host-shell: refused", "symlink")
    assert not repo.canary.exists(), "the planted program RAN on the host"


def test_dot_dot_never_leaves_the_workspace(repo):
    for cwd in ("../..", f"{repo.name}/../../etc", "/workspace/../tmp"):
        refused(repo.r.call("bash", {"command": "git status", "cwd": cwd}), "outside the workspace")


# -- 4. the forced-command wrapper and host_commands work together ----------------------------------
@pytest.fixture
def forced(host, tmp_path):
    """The README's pairing: runner's key may only run `runner host-shell` (authorized_keys
    `restrict,command=…`), and the Runner's policy says so (forced_command). git on the host is
    the real one but for `git push slow`, which records its pid and sleeps."""
    ws = tmp_path / "ws"
    ws.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    pidfile = tmp_path / "slow.pid"
    session = "forced-" + os.urandom(6).hex()
    probe = f"docker ps --filter label=runner.session={session} --format '{{{{.State}}}}'"
    (bin_dir / "git").write_text(f'#!/bin/sh\n[ "$2" = slow ] && {{ echo $$ > {pidfile}; exec sleep 600; }}\n'
                                 f'[ "$2" = probe ] && exec {probe}\n'
                                 'exec /usr/bin/git "$@"\n')
    (bin_dir / "git").chmod(0o755)
    keys = host.sshd.dir
    env = " ".join(f"{k}='{v}'" for k, v in {**host.env, "PATH": f"{bin_dir}:/usr/bin:/bin"}.items())
    line = (f'restrict,command="env {env} {VENV_BIN}/runner host-shell --allow git:push,git:status '
            f'--root {ws}" {(keys / "client.pub").read_text().strip()}\n')
    before = (keys / "authorized_keys").read_text()
    (keys / "authorized_keys").write_text(line + (keys / "other.pub").read_text())
    pol = policy(host, rules=RULES[:1] + RULES[3:], forced_command=True, env={})
    try:
        with Runner(executor="docker", workspace=ws, policy=pol, session=session) as r:
            yield SimpleNamespace(r=r, ws=ws, pidfile=pidfile, env=host.test_env, host=host)
    finally:
        (keys / "authorized_keys").write_text(before)


def test_forced_command_and_host_commands_work_together(forced):
    f = forced
    git("init", "-q", "-b", "main", str(f.ws / "proj"), env=f.env)
    (f.ws / "proj" / "sub").mkdir()
    (f.ws / "proj" / "sub" / "x.txt").write_text("x\n")
    git("add", ".", cwd=f.ws / "proj", env=f.env)
    git("commit", "-q", "-m", "x", cwd=f.ws / "proj", env=f.env)
    bare = f.ws.parent / "forced-remote.git"
    git("init", "-q", "--bare", str(bare), env=f.env)
    git("remote", "add", "origin", f"ssh://root@127.0.0.1:{f.host.sshd.port}{bare}", cwd=f.ws / "proj", env=f.env)
    res = f.r.call("bash", {"command": "git status --short --branch", "cwd": "proj/sub"})
    assert not res.is_error and res.text.startswith("## main") and res.meta["ran_on"] == "host", res.text
    res = f.r.call("bash", {"command": "git push origin HEAD:refs/heads/main", "cwd": "proj/sub"})
    assert not res.is_error, res.text
    assert git("rev-parse", "main", cwd=bare).stdout == git("rev-parse", "HEAD", cwd=f.ws / "proj").stdout
    # refused on the host: a symlink the sandbox made; and never anything but host-shell's rules
    assert f.r.call("bash", {"command": "ln -s /etc pr && echo ok"}).text.strip() == "ok"
    refused(f.r.call("bash", {"command": "git status", "cwd": "pr"}), "runner host-shell: refused", "symlink")
    refused(f.r.call("bash", {"command": "git status", "cwd": "."}), "runner host-shell: refused",
            "not in a git repository")


def test_the_forced_key_runs_nothing_else(forced):
    from executors import ExecRequest
    from executors.ssh import SSHConfig, SSHExecutor

    h = forced.host
    cfg = SSHConfig(host="127.0.0.1", port=h.sshd.port, user="root", key_file=h.sshd.client_key,
                    known_hosts=h.sshd.known_hosts, forced_command=True)
    with SSHExecutor(cfg) as ex:
        res = ex.exec(ExecRequest(argv=["sh", "-c", "id"], timeout=30))
        assert res.exit_code == 126 and b"runner host-shell: refused: sh -c id is not allowed" in res.stderr
        res = ex.exec(ExecRequest(argv=["runner-host/1", '{"argv": ["git", "status"], "cwd": "/etc"}'], timeout=30))
        assert res.exit_code == 126 and b"outside" in res.stderr, res.stderr
        res = ex.exec(ExecRequest(argv=["git", "push", "--exe=id"], timeout=30))  # a typed command line
        assert res.exit_code == 126 and b"--exe is not allowed for git push" in res.stderr, res.stderr


def test_a_timeout_kills_the_command_behind_the_forced_command(forced):
    f = forced
    git("init", "-q", str(f.ws / "proj"), env=f.env)
    res = f.r.call("bash", {"command": "git push slow", "cwd": "proj", "timeout": 2})
    assert res.is_error and "timed out after 2s" in res.text and res.meta["exit_code"] == 124, res.text
    pid = int(f.pidfile.read_text())
    deadline = time.monotonic() + 60  # the host kills it when the client hangs up (at worst: its backstop)
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
        time.sleep(0.1)
    assert not Path(f"/proc/{pid}").exists(), "the timed-out command still runs on the host"


def test_the_sandbox_is_frozen_while_a_host_command_runs(forced):
    """Between host-shell's check and git reading the repository, no sandbox process may run:
    a host command that looks at the sandbox finds it paused, and the sandbox goes on after."""
    f = forced
    git("init", "-q", str(f.ws / "proj"), env=f.env)
    assert f.r.call("bash", {"command": "sleep 600 >/dev/null 2>&1 & echo started"}).text.strip() == "started"
    res = f.r.call("bash", {"command": "git push probe", "cwd": "proj"})
    assert not res.is_error, res.text
    states = set(res.text.split())
    assert states == {"paused"}, res.text
    assert f.r.call("bash", {"command": "echo alive"}).text.strip() == "alive"
