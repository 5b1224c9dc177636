"""`runner host-shell`: only the allowed argv ever runs, with exec, never through a shell."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time

import pytest

from runner.host.repo import Place, Unsafe
from runner.host.shell import CommandRefused, Request, check, check_argv, parse_request, parse_rules

RULES = parse_rules("git:push,git:pull,gh")
# A fake git stands for git: host-shell reads the repository's config with `git config`.
DELEGATE_CHECKS = 'case "$1" in config|ls-files) exec /usr/bin/git "$@";; esac\n'  # host-shell's own reads of the repository



@pytest.mark.parametrize("cmd, argv", [
    ("git push", ["git", "push"]),
    ("git push origin main", ["git", "push", "origin", "main"]),
    ("git pull --rebase", ["git", "pull", "--rebase"]),
    ("gh pr list --limit 5", ["gh", "pr", "list", "--limit", "5"]),
    ("gh issue create --title 'Fix (parens) and #1'", ["gh", "issue", "create", "--title", "Fix (parens) and #1"]),
])
def test_allowed_commands_give_their_argv(cmd, argv):
    assert check(cmd, RULES) == argv


@pytest.mark.parametrize("cmd, says", [
    ("git push; rm -rf ~", "not allowed"),  # argv[1] is "push;"
    ("git push origin; rm -rf ~", "shell characters"),
    ("git push && curl evil", "shell characters"),
    ("git push $(rm -rf ~)", "shell characters"),
    ("git push `id`", "shell characters"),
    ("git push\nrm -rf ~", "newline"),
    ("git push --upload-pack='touch /tmp/x'", "--upload-pack"),
    ("git pull --upload-pack=evil", "--upload-pack"),
    ("git push --receive-pack evil", "--receive-pack"),
    ("git -c core.sshCommand=evil push", "not allowed"),
    ("git fetch", "not allowed"),
    ("rm -rf ~", "not allowed"),
    ("/usr/bin/git push", "not allowed"),
    ("bash -c 'git push'", "not allowed"),
    ("git push 'unterminated", "does not parse"),
    ("", "no command"),
    (None, "no command"),
])
def test_hostile_commands_are_refused(cmd, says):
    with pytest.raises(CommandRefused) as e:
        check(cmd, RULES)
    assert says in str(e.value)


def test_bad_allow_lists():
    for bad in ("", ",", "git::push", "/bin/sh"):
        with pytest.raises(ValueError):
            parse_rules(bad)


def _host_shell(original, allow, tmp_path, *more):
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    if original is not None:
        env["SSH_ORIGINAL_COMMAND"] = original
    return subprocess.run([sys.executable, "-m", "runner", "host-shell", "--allow", allow, *more], env=env,
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)


def test_runs_with_exec_and_nothing_else(tmp_path):
    """A fake `git` on PATH records its argv; the injected part never runs."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)  # a person's command runs in the login directory
    log = tmp_path / "argv.log"
    fake = tmp_path / "git"
    fake.write_text(f"#!/bin/sh\n{DELEGATE_CHECKS}for a in \"$@\"; do printf '%s\\n' \"$a\" >> {log}; done\necho fake-git-ran\n")
    fake.chmod(0o755)
    marker = tmp_path / "pwned"
    p = _host_shell("git push origin 'my branch'", "git:push", tmp_path)
    assert p.returncode == 0 and p.stdout == "fake-git-ran\n"
    assert log.read_text().splitlines() == ["push", "origin", "my branch"]
    log.unlink()
    p = _host_shell("git push origin 'my branch'", "git:push", tmp_path, "--root", "/srv/elsewhere")
    assert p.returncode == 0 and p.stdout == "fake-git-ran\n"  # --root confines requests, not a person's line
    assert log.read_text().splitlines() == ["push", "origin", "my branch"]
    for hostile in (f"git push; touch {marker}", f"git push $(touch {marker})", f"git push `touch {marker}`",
                    f"git push\ntouch {marker}", f"git push --upload-pack='touch {marker}'"):
        p = _host_shell(hostile, "git:push", tmp_path)
        assert p.returncode == 126 and p.stderr.startswith("runner host-shell: refused"), p.stderr
    assert not marker.exists()
    assert log.read_text().splitlines() == ["push", "origin", "my branch"]  # git never ran again


def test_missing_command_and_no_command(tmp_path):
    p = _host_shell("no-such-tool-xyz list", "no-such-tool-xyz", tmp_path)
    assert p.returncode == 127 and "command not found" in p.stderr
    p = _host_shell(None, "git", tmp_path)
    assert p.returncode == 126 and "no command" in p.stderr


# -- options: an allowlist per subcommand, exact names only -----------------------------------------
ALL = parse_rules("git:push,git:pull,git:fetch,git:status,gh,make:deploy")


@pytest.mark.parametrize("argv", [
    ["git", "push", "--exe=touch x", "origin"],  # git's unique abbreviations of --exec, --receive-pack …
    ["git", "push", "--exec", "touch x"],
    ["git", "push", "--receive=touch x"],
    ["git", "push", "--receive-p", "touch x"],
    ["git", "push", "origin", "HEAD", "--exe=x"],  # options after positional arguments: git permutes
    ["git", "pull", "--upload-p=touch x"],
    ["git", "pull", "--upl", "x"],
    ["git", "fetch", "--upload-pack=x"],
    ["git", "push", "--end-of-options", "--exec=x"],
    ["git", "push", "-c", "core.sshCommand=x"],
    ["git", "push", "-fc", "x"],  # a bundle hiding an option that is not allowed
    ["git", "push", "-fx"],
    ["git", "push", "--force=yes"],  # a flag given a value
    ["git", "push", "--force-with-lease", "--exec=x"],  # optional values only with '='
    ["git", "pull", "--rebase=interactive"],  # a value outside the allowed set
    ["git", "pull", "--recurse-submodules"],
    ["git", "push", "--signed"],
    ["git", "status", "--porcelain=v3"],
    ["gh", "alias", "set", "--shell", "x", "touch /tmp/x"],  # gh subcommands outside the table
    ["gh", "alias", "set", "x", "!touch /tmp/x"],
    ["gh", "repo", "clone", "r", "--", "--upload-pack=x"],
    ["gh", "pr", "create", "--body-file", "/etc/passwd"],  # reads a host file
    ["gh", "pr", "create", "--web"],
    ["gh", "pr", "list", "-L"],  # a value missing
    ["git", "-c", "core.fsmonitor=x", "status"],  # global options never match a rule
    ["git", "--exec-path=/tmp", "push"],
    ["make", "deploy", "-f", "/tmp/evil.mk"],  # unknown programs: no options after the prefix
    ["make", "deploy", "--eval=x"],
    ["git", "push", "origin", "--", "--exec=x"],  # after --: git and gh hand words on to what they run
    ["git", "pull", "origin", "--", "--upload-pack=x"],  # pull runs `git fetch origin --upload-pack=x`
    ["gh", "pr", "create", "-B", "--output=/tmp/x"],  # gh runs `git log BASE...HEAD`
    ["gh", "pr", "create", "--base=-x"],
    ["gh", "pr", "create", "-H-x"],
    # gh (pflag) reads -B=v as the value v, which the check must see: -B=--output=… was a base of
    # --output=…, and the `git log BASE...HEAD` gh runs wrote any host file the user can write
    ["gh", "pr", "create", "-B=--output=/tmp/x", "--fill"],
    ["gh", "pr", "create", "-dB=--output=/tmp/x"],
    ["gh", "pr", "create", "-H=--x"],
    ["gh", "pr", "list", "-R=o/r"],
    ["git", "push", "-o=x"],  # git reads "=x": refused alike, the value checked is the value used
    ["git", "status", "-u=no"],
    # a base or a head is a branch name, never a path or a revision expression
    ["gh", "pr", "create", "-B", "main", "-H", "/../../../victim.sh"],
    ["gh", "pr", "create", "--head=a/../../b"],
    ["gh", "pr", "create", "--base", "main~1"],
    ["gh", "pr", "create", "--base", "a b"],
    ["gh", "pr", "create", "-Bmain", "-H", "-:x"],
    ["gh", "pr", "create", "-H", "owner:--output=x"],
    ["gh", "pr", "create", "-H", "own/er:x"],
    ["gh", "pr", "list", "--base", "@{-1}"],
    ["gh", "pr", "create", "--base", ""],
])
def test_options_outside_the_allowlist_are_refused(argv):
    with pytest.raises(CommandRefused) as e:
        check_argv(argv, ALL)
    assert str(e.value).startswith("refused: ")


@pytest.mark.parametrize("argv", [
    ["git", "push"],
    ["git", "push", "-u", "origin", "HEAD"],
    ["git", "push", "-fu", "--porcelain", "origin", "+main"],
    ["git", "push", "--force-with-lease", "origin", "main"],
    ["git", "push", "--force-with-lease=main:abc123", "origin", "main"],
    ["git", "push", "-o", "ci.skip", "-oci.skip", "--push-option=x", "--push-option", "y", "origin"],
    ["git", "pull", "--rebase", "--rebase=merges", "--no-rebase", "-r", "origin", "main"],
    ["git", "fetch", "--all", "-p", "-P"],
    ["git", "status", "-sb", "--porcelain=v2", "-uno", "--untracked-files=all", "--", "a", "-"],
    ["gh", "pr", "list", "--limit", "5", "-L5", "--state=merged", "-s", "open", "-R", "o/r"],
    ["gh", "pr", "create", "--title", "Fix (parens) and #1", "-b", "- a list, as a body", "--draft"],
    ["gh", "issue", "view", "12", "--comments"],
    ["gh", "pr", "create", "-Bmain", "-B", "release/1.0", "--head", "octo-cat:feature/x-y", "--base=v2.x"],
    ["make", "deploy", "prod", "--", "-not-an-option"],  # a command with no subcommand table: its own rules
])
def test_allowed_options_pass(argv):
    assert check_argv(argv, ALL) == argv


def test_git_and_gh_run_only_the_supported_subcommands():
    rules = parse_rules("git,gh")
    for argv in (["git", "config", "core.fsmonitor", "x"], ["git", "gc"], ["gh", "api", "/user"],
                 ["gh", "extension", "install", "x"]):
        with pytest.raises(CommandRefused, match="only these"):
            check_argv(argv, rules)
    assert check_argv(["git", "status"], rules) == ["git", "status"]


# -- the request a Runner sends ----------------------------------------------------------------------
def test_a_request_round_trips_and_is_checked_like_a_command():
    req = Request(["git", "push", "origin", "my branch; $(x)"], "/srv/ws/sub", 30.0)
    assert parse_request(req.line(), RULES) == req  # argv exact: no shell reads it, nothing to refuse
    for argv in (["git", "push", "--exe=x"], ["sh", "-c", "id"], ["git", "push", "a\nb"]):
        with pytest.raises(CommandRefused):
            parse_request(Request(argv).line(), RULES)


@pytest.mark.parametrize("line, says", [
    ("runner-host/2 '{}'", "speaks runner-host/1"),
    ("runner-host/1 'not json'", "one JSON object"),
    ("runner-host/1 '{\"argv\": [\"git\", \"push\"], \"env\": {\"LD_PRELOAD\": \"x\"}}'", "one JSON object"),
    ("runner-host/1 '{\"argv\": []}'", "non-empty list"),
    ("runner-host/1 '{\"argv\": [\"git\", 1]}'", "non-empty list"),
    ("runner-host/1 '{\"argv\": [\"git\", \"push\"], \"cwd\": 5}'", "cwd"),
    ("runner-host/1 '{\"argv\": [\"git\", \"push\"], \"timeout\": -1}'", "timeout"),
    ("runner-host/1 '" + "[" * 100000 + "'", "longer than"),
    ("runner-host/1 '" + "[" * 5000 + "'", "one JSON object"),
])
def test_bad_requests_are_refused(line, says):
    with pytest.raises(CommandRefused, match=re.escape(says)):
        parse_request(line, RULES)


# -- the working directory, resolved on the host ----------------------------------------------------
def test_the_working_directory_is_confined_without_following_links(tmp_path):
    root = tmp_path / "ws"
    (root / "a" / "b").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    (root / "a" / "out").symlink_to(tmp_path / "outside")
    (root / "link").symlink_to(root / "a")  # even a link that stays inside is refused
    place = Place(str(root / "a" / "b"), str(root))
    assert place.path == str(root / "a" / "b") and os.path.samestat(os.fstat(place.fd), os.stat(root / "a" / "b"))
    place.close()
    for cwd, says in ((root / "a" / "out", "is a symlink"), (root / "link" / "b", "is a symlink"),
                      (root / "a" / ".." / ".." / "outside", "outside"), (f"{root}/a/../b", "'..'"),
                      (tmp_path / "outside", "outside"), ("a/b", "not an absolute path"),
                      (root / "missing", "does not exist")):
        with pytest.raises(Unsafe, match=re.escape(says)):
            Place(str(cwd), str(root))


def test_the_host_shell_command_needs_a_root_for_a_request(tmp_path):
    p = _host_shell(Request(["git", "status"], str(tmp_path)).line(), "git:status", tmp_path)
    assert p.returncode == 126 and "no --root" in p.stderr


def _git(*args, cwd, env):
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True, timeout=60)


@pytest.fixture
def repo_env(tmp_path):
    cfg = tmp_path / "gitconfig"
    cfg.write_text("[user]\n\tname = T\n\temail = t@example.invalid\n[safe]\n\tdirectory = *\n"
                   "[protocol \"file\"]\n\tallow = always\n")
    env = {"PATH": os.environ["PATH"], "GIT_CONFIG_GLOBAL": str(cfg), "HOME": str(tmp_path)}
    root = tmp_path / "ws"
    _git("init", "-q", "-b", "main", str(root / "r"), cwd=tmp_path, env=env)
    (root / "r" / "a").write_text("a\n")
    _git("add", "a", cwd=root / "r", env=env)
    _git("commit", "-q", "-m", "a", cwd=root / "r", env=env)
    return root, env


def _repository(root, monkeypatch, env):
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    place = Place(str(root / "r"), str(root))
    try:
        return place.repository()
    finally:
        place.close()


def test_a_checked_out_submodule_is_refused_and_a_gitlink_without_one_is_not(repo_env, monkeypatch, tmp_path):
    """host-shell's repository check, without docker: status would run git in the submodule under
    its own configuration (test_host_commands.py has the attack end to end)."""
    root, env = repo_env
    r = root / "r"
    _git("init", "-q", str(r / "dir" / "sub"), cwd=r, env=env)
    _git("commit", "-q", "--allow-empty", "-m", "s", cwd=r / "dir" / "sub", env=env)
    _git("add", "dir/sub", cwd=r, env=env)
    with pytest.raises(Unsafe, match=re.escape(f"{r}/dir/sub is a submodule with its repository checked out")):
        _repository(root, monkeypatch, env)
    subprocess.run(["rm", "-rf", str(r / "dir" / "sub")], check=True)  # the gitlink stays: nothing to enter
    assert _repository(root, monkeypatch, env) == (str(r), str(r / ".git"))
    (tmp_path / "elsewhere" / "sub").mkdir(parents=True)
    (tmp_path / "elsewhere" / "sub" / ".git").mkdir()
    (r / "dir").rmdir()
    (r / "dir").symlink_to(tmp_path / "elsewhere")  # git would follow it to a repository outside
    with pytest.raises(Unsafe, match="dir/sub is a symlink"):
        _repository(root, monkeypatch, env)
    (r / "dir").unlink()
    (r / "dir").write_text("a file where the gitlink's directory was\n")
    assert _repository(root, monkeypatch, env) == (str(r), str(r / ".git"))
    _git("init", "-q", str(r / "loose"), cwd=r, env=env)  # untracked: git never enters it
    assert _repository(root, monkeypatch, env) == (str(r), str(r / ".git"))
    (r / ".git" / "modules" / "x").mkdir(parents=True)
    with pytest.raises(Unsafe, match=re.escape(".git/modules holds submodules' repositories")):
        _repository(root, monkeypatch, env)


def test_a_fifo_in_the_git_directory_is_refused_before_git_reads_it(repo_env, monkeypatch):
    """A FIFO as .git/index held host-shell's `git ls-files` for 60 s whatever the request's
    timeout, then ended in a traceback; a FIFO, socket or device anywhere in the git directory is
    now refused by name, before any git runs."""
    root, env = repo_env
    git_dir = root / "r" / ".git"
    for name in ("index", "refs/heads/fifo", "objects/pack/tmp_x"):
        (git_dir / name).unlink(missing_ok=True)
        os.mkfifo(git_dir / name)
        t0 = time.monotonic()
        with pytest.raises(Unsafe, match=re.escape(f"{git_dir}/{name} is neither a file nor a directory")):
            _repository(root, monkeypatch, env)
        assert time.monotonic() - t0 < 10  # refused, not waited on (60 s before)
        (git_dir / name).unlink()
    _git("read-tree", "HEAD", cwd=root / "r", env=env)  # the index back
    assert _repository(root, monkeypatch, env) == (str(root / "r"), str(git_dir))


def test_a_crowded_git_directory_is_refused_as_it_is_read(repo_env, monkeypatch):
    """The entry caps stop the listing at the cap: a directory's whole listing was read into
    memory first (~146 MiB a million entries, the sandbox's choice)."""
    from runner.host import repo as hostrepo

    root, env = repo_env
    many = root / "r" / ".git" / "refs" / "heads" / "many"
    many.mkdir()
    for i in range(60):
        (many / f"b{i}").write_text("0" * 40 + "\n")
    monkeypatch.setattr(hostrepo, "MAX_GITDIR_ENTRIES", 40)
    taken = []
    real = os.scandir

    def scandir(fd):
        it = real(fd)

        class Counted:
            def __enter__(self):
                return self

            def __exit__(self, *exc):
                it.close()

            def __iter__(self):
                for e in it:
                    taken.append(e.name)
                    yield e
        return Counted()

    monkeypatch.setattr(os, "scandir", scandir)
    with pytest.raises(Unsafe, match="holds more than 40 entries outside its objects"):
        _repository(root, monkeypatch, env)
    assert len(taken) == 41, len(taken)  # read up to the one past the cap, no further


def test_the_index_check_is_bounded_by_the_request(repo_env, monkeypatch):
    """A git that does not read the index in time is a refusal (Unsafe), not a traceback."""
    root, env = repo_env
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    (root / "slowbin").mkdir()
    # only the index's read stalls: the config's parse (its own 30 s bound) runs the real git
    (root / "slowbin" / "git").write_text(f'#!/bin/sh\n[ "$1" = ls-files ] && exec sleep 5\nexec {shutil.which("git")} "$@"\n')
    (root / "slowbin" / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{root / 'slowbin'}:{env['PATH']}")
    place = Place(str(root / "r"), str(root))
    try:
        with pytest.raises(Unsafe, match=re.escape("git did not read it within 0.5 s")):
            place.repository(0.5)
    finally:
        place.close()


@pytest.mark.parametrize("where", ["objects/ab/cdef", "objects/pack/pack-1.pack", "objects/pack/pack-1.idx"])
def test_a_link_among_the_objects_is_refused_before_git_runs(repo_env, monkeypatch, tmp_path, where):
    root, env = repo_env
    link = root / "r" / ".git" / where
    link.parent.mkdir(exist_ok=True)
    link.symlink_to(tmp_path / "gitconfig")
    with pytest.raises(Unsafe, match=re.escape(f".git/{where} is a symlink")):
        _repository(root, monkeypatch, env)


def _rename_in_index(index, old: bytes, new: bytes) -> None:
    """Rewrite an entry's name in a version-2 index, bytes and checksum, as a sandbox can: git
    checks a path when it adds it, not when it reads the index."""
    import hashlib
    import struct

    data = index.read_bytes()
    assert data[:4] == b"DIRC" and struct.unpack(">I", data[4:8])[0] == 2
    n, off, entries = struct.unpack(">I", data[8:12])[0], 12, []
    for _ in range(n):
        fixed = data[off:off + 62]
        size = struct.unpack(">H", fixed[60:62])[0] & 0xFFF
        entries.append((fixed, data[off + 62:off + 62 + size]))
        off += (62 + size + 8) // 8 * 8
    out = b"DIRC" + struct.pack(">II", 2, n)
    for fixed, name in sorted((f, new if nm == old else nm) for f, nm in entries):
        flags = (struct.unpack(">H", fixed[60:62])[0] & ~0xFFF) | len(name)
        out += (fixed[:60] + struct.pack(">H", flags) + name).ljust((62 + len(name) + 8) // 8 * 8, b"\0")
    index.write_bytes(out + hashlib.sha1(out).digest())  # extensions dropped: git rebuilds them


@pytest.mark.parametrize("name", ["/etc/hostname", "../../outside", "a/../../outside", "sub/", "d//sub", ".git/config",
                                  "x/.GIT/config", "./a"])
def test_an_index_path_git_never_writes_is_refused(repo_env, monkeypatch, tmp_path, name):
    """A name the sandbox wrote into the index bytes: status stats, hashes and (with -v -v)
    prints the file it names, outside the work tree; a gitlink named `sub/` passed the submodule
    check, which split it into `sub` and an empty part that was no directory."""
    root, env = repo_env
    r = root / "r"
    blob = subprocess.run(["git", "hash-object", "-w", "a"], cwd=r, env=env, check=True, capture_output=True,
                          text=True).stdout.strip()
    _git("update-index", "--add", "--cacheinfo", f"100644,{blob},placeholder", cwd=r, env=env)
    _rename_in_index(r / ".git" / "index", b"placeholder", name.encode())
    listed = subprocess.run(["git", "ls-files", "--stage", "-z"], cwd=r, env=env, capture_output=True).stdout
    assert b"\t" + name.encode() + b"\0" in listed  # git reads it as written
    with pytest.raises(Unsafe, match="a path git never writes there"):
        _repository(root, monkeypatch, env)


def _pins() -> dict[str, str]:
    """The command-line configuration host-shell gives git (hostrepo.PINS, as git reads them)."""
    from runner.host import repo as hostrepo

    env = hostrepo.environment({}, None)
    return {env[f"GIT_CONFIG_KEY_{i}"]: env[f"GIT_CONFIG_VALUE_{i}"] for i in range(int(env["GIT_CONFIG_COUNT"]))}


def test_pull_takes_no_autostash_and_the_pins_turn_it_off():
    """A pull's autostash runs status after the merge, which may have put a gitlink over a
    repository git did not track before: status then enters it (the host's own config may turn
    autostash on, so it is pinned off too)."""
    with pytest.raises(CommandRefused, match="--autostash"):
        check_argv(["git", "pull", "--autostash"], parse_rules("git:pull"))
    pins = _pins()
    assert pins["merge.autoStash"] == pins["rebase.autoStash"] == "false"
    assert pins["diff.submodule"] == "short" and pins["status.submoduleSummary"] == "false"


def test_git_acts_on_no_state_the_sandbox_left_in_the_git_directory():
    """rerere's MERGE_RR paths, the index's untracked cache, and automatic gc (which detached and
    outlived the command) are pinned off, over the repository's and the host's own config;
    test_host_commands.py has rerere and gc end to end."""
    pins = _pins()
    assert pins["rerere.enabled"] == pins["core.untrackedCache"] == pins["gc.autoDetach"] == "false"
    assert pins["gc.auto"] == "0" and pins["maintenance.auto"] == "false"


def test_a_repository_as_git_leaves_it_is_taken(repo_env, monkeypatch):
    """What git's own housekeeping writes into .git (packs with bitmaps and reverse indexes, a
    split commit-graph, packed refs, FETCH_HEAD and ORIG_HEAD, a shallow file, git-lfs's folder)
    is all expected: only an operation's state and what names other places is refused."""
    root, env = repo_env
    r = root / "r"
    for i in range(3):
        (r / "a").write_text(f"{i}\n")
        _git("commit", "-q", "-am", f"c{i}", cwd=r, env=env)
    _git("gc", "-q", cwd=r, env=env)
    _git("-c", "pack.writeReverseIndex=true", "repack", "-q", "-a", "-d", "--write-bitmap-index", cwd=r, env=env)
    _git("commit-graph", "write", "--reachable", "--split", cwd=r, env=env)
    _git("fetch", "-q", str(r), "main", cwd=r, env=env)
    _git("reset", "-q", "--hard", "HEAD~1", cwd=r, env=env)  # ORIG_HEAD
    (r / ".git" / "shallow").write_text("")
    (r / ".git" / "lfs" / "objects").mkdir(parents=True)
    names = {p.name for p in (r / ".git").iterdir()} | {p.name for p in (r / ".git" / "objects" / "pack").iterdir()}
    assert {"FETCH_HEAD", "ORIG_HEAD", "packed-refs"} <= names and any(n.endswith(".bitmap") for n in names)
    assert _repository(root, monkeypatch, env) == (str(r), str(r / ".git"))
    _git("multi-pack-index", "write", cwd=r, env=env)  # names its packs by any path: not taken
    with pytest.raises(Unsafe, match="multi-pack-index is not what host commands run git with"):
        _repository(root, monkeypatch, env)


@pytest.mark.parametrize("key, value", [("remote.--upload-pack=x.url", "https://h/r"),
                                        ("remote.origin.url", "--upload-pack=x"),
                                        ("branch.-x.remote", "origin"), ("branch.main.merge", "--output=/tmp/x"),
                                        ("remote.origin.tagopt", "--upload-pack=x"),
                                        ("remote.--upload-pack=x.tagopt", "--no-tags")])  # fetch --all names it
def test_a_remote_or_branch_named_or_valued_like_an_option_is_refused(key, value):
    """git fetch --all runs `git fetch NAME` per remote without `--`; gh runs `git log NAME/BASE…`."""
    from runner.host import repo as hostrepo

    with pytest.raises(Unsafe, match="may not start with '-'"):
        hostrepo.check_config([("remote.origin.url", "https://h/r"), (key, value)], "config")
    hostrepo.check_config([("remote.origin.url", "https://h/r"), ("branch.main.merge", "refs/heads/main"),
                           ("remote.origin.tagopt", "--no-tags"),  # what `git clone --no-tags` writes
                           ("branch.main.description", "- work in progress")], "config")


def test_a_clone_without_tags_is_taken(repo_env, monkeypatch):
    """`git clone --no-tags` writes remote.origin.tagopt = --no-tags: an option, and an allowed one."""
    root, env = repo_env
    _git("clone", "-q", "--no-tags", str(root / "r"), str(root / "c"), cwd=root, env=env)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    place = Place(str(root / "c"), str(root))
    try:
        assert place.repository() == (str(root / "c"), str(root / "c" / ".git"))
    finally:
        place.close()
