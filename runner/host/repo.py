"""Where a host command runs, and which of the workspace's git configuration it may honour.

Runs on the host (inside `runner host-shell`), where the workspace is hostile: the sandbox can
plant symlinks anywhere in it, rename `.git` and write any key into `.git/config`. So:

- the working directory is resolved on the host, one component at a time from the root with
  O_NOFOLLOW: no symlink anywhere in it, no `..`, and the process enters it by descriptor;
- the repository is the nearest real `.git` directory between it and the root (a symlink, a
  gitfile, `commondir` or object alternates, which all lead elsewhere, are refused), and git is
  pinned to it with GIT_DIR / GIT_WORK_TREE so it cannot discover another one;
- `.git/config` is read once (a regular file of bounded size, never through a link) and parsed
  without includes; every key must be on a small allowlist of keys that name no program;
- no entry of `.git` is a link (loose objects and packs included), `.git` holds only what a clone
  keeps (no operation in progress, no linked worktree: git takes such state as its own), every
  path of the index is one git itself would write (the sandbox can write the index byte by byte),
  and a repository with submodules is refused: git runs in a checked-out one under its own,
  unchecked configuration;
- git runs with pins that win over any repository file, for the keys whose names are fixed
  (hooks, fsmonitor, protocols, submodule recursion, signing, rerere, autostash, automatic gc),
  and an environment that sets the pager, editors and askpass to nothing.
"""
from __future__ import annotations

import errno
import os
import re
import shutil
import stat
import subprocess

from ..errors import RunnerError

MAX_CONFIG = 256 * 1024
CHECK_WITHIN = 60.0  # seconds the index's check may take at most (a request's own timeout, if shorter)

# Keys (as `git config --list` prints them: section and name lower-case) that name no program,
# no file and no other repository. Everything else in the workspace's config is refused.
_ALLOWED_KEYS = re.compile(r"""^(?:
    core\.(?:repositoryformatversion|filemode|bare|logallrefupdates|ignorecase|precomposeunicode|symlinks
          |autocrlf|eol|safecrlf|checkstat|trustctime|quotepath|abbrev)
  | extensions\.(?:objectformat|refstorage)
  | remote\.[^\n]+\.(?:url|pushurl|fetch|push|prune|prunetags|tagopt|mirror)
  | branch\.[^\n]+\.(?:remote|pushremote|merge|rebase|description)
  | user\.(?:name|email)
  | (?:pull\.(?:rebase|ff)|push\.(?:default|autosetupremote|followtags)|fetch\.(?:prune|prunetags))
  | init\.defaultbranch
  | lfs\.repositoryformatversion
)$""", re.X)

# Command-line configuration (GIT_CONFIG_COUNT) wins over every file for these single-valued
# keys, even if the sandbox rewrites .git/config between the check and git reading it.
PINS = (
    ("core.hooksPath", "/dev/null"),  # no hook: neither .git/hooks (the sandbox can rename .git) nor another path
    ("core.fsmonitor", "false"),
    ("protocol.allow", "never"),  # then only these; file (a host path outside the workspace) and ext never
    ("protocol.https.allow", "always"),
    ("protocol.http.allow", "always"),
    ("protocol.ssh.allow", "always"),
    ("protocol.git.allow", "always"),
    ("protocol.file.allow", "never"),
    ("protocol.ext.allow", "never"),
    ("protocol.fd.allow", "never"),
    ("fetch.recurseSubmodules", "false"),  # a submodule's config is the workspace's too
    ("submodule.recurse", "false"),
    ("push.recurseSubmodules", "no"),
    ("diff.ignoreSubmodules", "all"),  # a default only (.gitmodules' ignore= wins): check_index is the guard
    ("status.submoduleSummary", "false"),
    ("diff.submodule", "short"),  # log would open a submodule's repository
    ("merge.autoStash", "false"),  # the stash's apply runs status, after a merge that may add a gitlink over a
    ("rebase.autoStash", "false"),  # repository git did not track (check_index saw none before the pull)
    # State in .git that git would act on, which the sandbox wrote: no rerere (it turns itself on
    # when .git/rr-cache exists and copies to and from the paths .git/MERGE_RR names, host files
    # included), no untracked cache (the index's record of the work tree's directories), and no
    # automatic gc or maintenance (detached into a session of its own, it went on after the
    # command returned and the sandbox ran again, through whatever .git had become).
    ("rerere.enabled", "false"),
    ("core.untrackedCache", "false"),
    ("gc.auto", "0"),
    ("gc.autoDetach", "false"),
    ("maintenance.auto", "false"),
    ("core.multiPackIndex", "false"),  # its pack names are joined onto objects/pack unchecked (and refused above)
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
    ("push.gpgSign", "false"),
)
ENV_PINS = {
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_ASKPASS": "",  # set but empty: git then skips core.askPass and SSH_ASKPASS
    "GIT_PAGER": "cat",
    "PAGER": "cat",
    "GIT_EDITOR": ":",  # git's own "no editor"
    "GIT_SEQUENCE_EDITOR": ":",
    "GIT_MERGE_AUTOEDIT": "no",
}


class Unsafe(RunnerError):
    """The working directory or the repository is not one a host command may run in."""


def _open_dir(name: str, dir_fd: int | None, shown: str) -> int:
    try:
        return os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as e:
        if e.errno == errno.ENOTDIR:  # what O_DIRECTORY|O_NOFOLLOW gives a symlink, on Linux
            try:
                is_link = stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode)
            except OSError:
                is_link = False
            if not is_link:
                raise Unsafe(f"{shown} is not a directory") from None
        if e.errno in (errno.ELOOP, errno.EMLINK, errno.ENOTDIR):
            raise Unsafe(f"{shown} is a symlink; host commands never follow a link in the workspace") from None
        if e.errno == errno.ENOENT:
            raise Unsafe(f"{shown} does not exist") from None
        raise Unsafe(f"{shown}: {e.strerror}") from None


class Place:
    """A confined working directory: its symlink-free path, and descriptors of every directory
    from the root down to it (closed by close())."""

    def __init__(self, cwd: str, root: str) -> None:
        if not os.path.isabs(cwd):
            raise Unsafe(f"the working directory {cwd!r} is not an absolute path")
        self.root = os.path.realpath(root)  # the admin's (or the controller's) path: trusted
        rel = None
        for base in dict.fromkeys((os.path.normpath(root), self.root)):
            if cwd == base or cwd.startswith(base.rstrip("/") + "/"):
                rel = cwd[len(base):].strip("/")
                break
        if rel is None:
            raise Unsafe(f"the working directory {cwd} is outside {self.root}, the only place host commands run")
        parts = [p for p in rel.split("/") if p not in ("", ".")]
        if ".." in parts:
            raise Unsafe(f"the working directory {cwd} contains '..'")
        self.fds = [_open_dir(self.root, None, self.root)]
        self.dirs = [self.root]
        try:
            for p in parts:
                path = os.path.join(self.dirs[-1], p)
                self.fds.append(_open_dir(p, self.fds[-1], path))
                self.dirs.append(path)
        except BaseException:
            self.close()
            raise
        self.path = self.dirs[-1]

    @property
    def fd(self) -> int:
        return self.fds[-1]

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = []

    def repository(self, timeout: float = CHECK_WITHIN) -> tuple[str, str] | None:
        """(work tree, git dir) of the nearest `.git` from here up to the root, checked; None if
        there is none. timeout: seconds the index's check (a git run) may take."""
        for d, fd in zip(reversed(self.dirs), reversed(self.fds), strict=False):
            try:
                st = os.lstat(".git", dir_fd=fd)
            except FileNotFoundError:
                continue
            shown = os.path.join(d, ".git")
            if stat.S_ISLNK(st.st_mode):
                raise Unsafe(f"{shown} is a symlink; host commands never follow a link in the workspace")
            if not stat.S_ISDIR(st.st_mode):
                raise Unsafe(f"{shown} is not a directory (a gitfile of a worktree or submodule leads elsewhere; "
                             "run host commands in the main repository)")
            gfd = _open_dir(".git", fd, shown)
            try:
                check_gitdir(gfd, shown)
            finally:
                os.close(gfd)
            check_index(d, fd, shown, timeout)
            return d, shown
        return None


_NO_SUBMODULES = "host commands refuse a repository with submodules (run this one yourself)"


def check_index(work_tree: str, fd: int, git_dir: str, timeout: float = CHECK_WITHIN) -> None:
    """Every path of the index is one git itself would have written (git checks a path when it
    adds it, not when it reads the index, which the sandbox can write byte by byte): `/x`, `../x`,
    `x/`, `a//b` and `.git/x` name files outside the work tree or inside a git directory, which
    status then stats, hashes and diffs (`-v -v` printed a host file's lines). And no gitlink (a
    submodule, mode 160000) has a repository in the work tree: status, a pull's merge and gh run
    git in a checked-out submodule, where its own configuration (a clean filter, say: no pin can
    name them all) and a gitfile to any repository of this host rule, none of them checked. A
    repository git does not track is never entered."""
    git = shutil.which("git")
    if git is None:
        raise Unsafe("git is not installed on this host: cannot check the repository's index")
    try:
        p = subprocess.run([git, "ls-files", "--stage", "-z"], env=environment(dict(os.environ), (work_tree, git_dir)),
                           cwd=fd_path(fd), capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise Unsafe(f"{git_dir}/index: git did not read it within {timeout:g} s") from None
    if p.returncode != 0:
        raise Unsafe(f"{git_dir}/index does not read: {p.stderr.decode('utf-8', 'replace').strip()[:300]}")
    for entry in p.stdout.split(b"\0"):
        meta, tab, raw = entry.partition(b"\t")
        if not tab:
            continue
        path = os.fsdecode(raw)
        parts = path.split("/")
        if "" in parts or any(part in (".", "..") or part.lower() == ".git" for part in parts):
            raise Unsafe(f"{git_dir}/index names {path!r}, a path git never writes there (it leads out of the work "
                         "tree or into a git directory); host commands refuse such an index")
        if meta.startswith(b"160000 ") and _holds_git(fd, path):
            raise Unsafe(f"{work_tree}/{path} is a submodule with its repository checked out: git would run there "
                         f"with configuration the sandbox wrote; {_NO_SUBMODULES}")


def fd_path(fd: int) -> str:
    """A path that names the directory behind fd, whatever its path names now."""
    return f"/proc/self/fd/{fd}"


def _holds_git(fd: int, rel: str) -> bool:
    """rel (a path in the work tree) is a directory holding a `.git` of any kind; a link on the way
    is refused (git would follow it), a part missing or not a directory holds no repository."""
    fds: list[int] = []
    try:
        for part in rel.split("/"):
            at = fds[-1] if fds else fd
            try:
                st = os.lstat(part, dir_fd=at)
            except (FileNotFoundError, NotADirectoryError):
                return False
            if stat.S_ISLNK(st.st_mode):
                raise Unsafe(f"{rel} is a symlink; host commands never follow a link in the workspace")
            if not stat.S_ISDIR(st.st_mode):
                return False
            fds.append(_open_dir(part, at, rel))
        return bool(fds) and _exists(".git", fds[-1])
    finally:
        for f in fds:
            os.close(f)


def _exists(name: str, dir_fd: int) -> bool:
    try:
        os.lstat(name, dir_fd=dir_fd)
        return True
    except FileNotFoundError:
        return False
    except NotADirectoryError:
        return False


def read_bounded(name: str, dir_fd: int, shown: str, limit: int = MAX_CONFIG) -> bytes | None:
    """A regular file's bytes (None if absent), never through a link, never more than limit."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.EMLINK):
            raise Unsafe(f"{shown} is a symlink; host commands never follow a link in the workspace") from None
        raise Unsafe(f"{shown}: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Unsafe(f"{shown} is not a regular file")
        if st.st_size > limit:
            raise Unsafe(f"{shown} is larger than {limit} bytes")
        data = os.read(fd, limit + 1)
        if len(data) > limit:
            raise Unsafe(f"{shown} is larger than {limit} bytes")
        return data
    finally:
        os.close(fd)


MAX_GITDIR_ENTRIES = 200_000
MAX_OBJECT_ENTRIES = 2_000_000  # loose objects and packs: listed (a link among them is refused), never read
_OBJECTS = re.compile(r"^objects/(?:[0-9a-f]{2}|pack)/")  # their entries count apart, and are not descended
_NOT_WALKED = re.compile(r"^hooks$")  # never run: core.hooksPath is pinned to /dev/null
# What a git directory may hold, where git acts on what it finds by name: what a clone keeps, and
# nothing of an operation in progress. Git takes the state it finds there as its own: a stash
# MERGE_AUTOSTASH names is applied after a merge (and its status entered a submodule), the
# commondir of .git/worktrees/* had fetch read another repository's refs, a multi-pack-index
# names packs by any path, and rerere's MERGE_RR names files to copy.
_EXPECTED = {
    "": re.compile(r"^(?:HEAD|config|description|index|hooks|info|logs|objects|refs|packed-refs|FETCH_HEAD"
                   r"|ORIG_HEAD|COMMIT_EDITMSG|TAG_EDITMSG|shallow|branches|remotes|lfs|gitk\.cache)$"),
    "objects/": re.compile(r"^(?:[0-9a-f]{2}|pack|info|tmp_.*|incoming-.*)$"),
    "objects/pack/": re.compile(r"^(?:pack-(?:[0-9a-f]{40}|[0-9a-f]{64})\.(?:pack|idx|rev|keep|promisor|mtimes|bitmap)"
                                r"|tmp_.*|\.tmp-.*)$"),
    "objects/info/": re.compile(r"^(?:packs|commit-graph|commit-graphs)$"),
}


def check_no_links(gfd: int, shown: str) -> None:
    """No symlink anywhere in the git directory: git writes FETCH_HEAD, MERGE_MSG, reflogs and
    refs through them, which would truncate and write host files outside the workspace, and it
    reads, freshens (sets the time of) and sends objects and packs through them. Walked by
    wspath.walk (any depth, two descriptors open); a directory it cannot enter is refused."""
    from ..untrusted.wspath import TreeMoved, walk

    def parent(path: str) -> str:
        up = path.rpartition("/")[0]
        return up + "/" if up else ""

    def prune(path: str) -> bool:
        return bool(_OBJECTS.match(parent(path)) or _NOT_WALKED.match(path))

    def skipped(path: str, why: str) -> None:
        raise Unsafe(f"{shown}/{path} could not be checked: {why}")

    seen = objects = 0
    try:
        for drel, name, st in walk(os.dup(gfd), prune=prune, skipped=skipped):
            rel = drel + "/" if drel else ""
            if _OBJECTS.match(rel):  # counted as read: a directory's size is the sandbox's choice
                objects += 1
                if objects > MAX_OBJECT_ENTRIES:
                    raise Unsafe(f"{shown} holds more than {MAX_OBJECT_ENTRIES} objects and packs (`git gc` packs them)")
            else:
                seen += 1
                if seen > MAX_GITDIR_ENTRIES:
                    raise Unsafe(f"{shown} holds more than {MAX_GITDIR_ENTRIES} entries outside its objects")
            path, expected = f"{rel}{name}", _EXPECTED.get(rel)
            if stat.S_ISLNK(st.st_mode):
                raise Unsafe(f"{shown}/{path} is a symlink; git would read or write through it, outside the workspace")
            if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
                raise Unsafe(f"{shown}/{path} is neither a file nor a directory (a FIFO, a socket or a device): git "
                             "would wait on it or read what no repository holds")
            if expected is not None and not expected.match(name):
                raise Unsafe(f"{shown}/{path} is not what host commands run git with: no merge, rebase, cherry-pick, "
                             "bisect or other operation in progress, no linked worktree, and nothing git would take "
                             "as its own state beyond what a clone keeps; finish or abort the operation (or remove "
                             "it), or run the command yourself")
    except TreeMoved:
        raise Unsafe(f"{shown} changed while it was checked; try again") from None


def check_gitdir(gfd: int, shown: str) -> None:
    for name, why in (("commondir", "its configuration and refs live in another directory"),
                      ("objects/info/alternates", "it reads objects from other repositories on this host"),
                      ("objects/info/http-alternates", "it reads objects from other places"),
                      ("config.worktree", "it holds more configuration")):
        if _exists(name, gfd):
            raise Unsafe(f"{shown}/{name} exists: {why}; host commands refuse such a repository")
    if _exists("modules", gfd):
        raise Unsafe(f"{shown}/modules holds submodules' repositories: git would run in them with configuration "
                     f"the sandbox wrote; {_NO_SUBMODULES}")
    check_no_links(gfd, shown)
    data = read_bounded("config", gfd, f"{shown}/config")
    if data:
        check_config(parse_config(data, f"{shown}/config"), f"{shown}/config")


def parse_config(data: bytes, shown: str) -> list[tuple[str, str]]:
    """The (key, value) pairs of a config file's bytes, as git reads them, includes not followed."""
    git = shutil.which("git")
    if git is None:
        raise Unsafe("git is not installed on this host: cannot check the repository's configuration")
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_DIR"] = "/dev/null/no-repository"  # never discover or read a repository here
    try:
        p = subprocess.run([git, "config", "--file", "-", "--no-includes", "--list", "-z"], input=data, env=env,
                           cwd="/", capture_output=True, timeout=30)
    except subprocess.TimeoutExpired:  # (bounded bytes from stdin: a wedged git, not the sandbox's doing)
        raise Unsafe(f"{shown}: git did not parse it within 30 s") from None
    if p.returncode != 0:
        raise Unsafe(f"{shown} does not parse: {p.stderr.decode('utf-8', 'replace').strip()[:300]}")
    pairs = []
    for entry in p.stdout.split(b"\0"):
        if entry:
            key, _, value = entry.decode("utf-8", "replace").partition("\n")
            pairs.append((key, value))
    return pairs


_VALUES = {"extensions.refstorage": re.compile(r"^files$", re.I)}  # reftable: its tables.list names files by any path


# A remote's or a branch's name, and the values that name places, are words git and gh put on the
# command lines of what they run (`git fetch --all` runs `git fetch NAME` for each remote, without
# `--`; gh runs `git log NAME/BASE...`): none may start with '-'. A tagopt is an option, one of two.
_NAMED = re.compile(r"^(?:remote|branch)\.(.+)\.([^.]+)$")
_WORDS = frozenset({"url", "pushurl", "fetch", "push", "remote", "pushremote", "merge"})
_TAGOPT = frozenset({"--tags", "--no-tags"})


def _option_like(key: str, value: str) -> bool:
    m = _NAMED.match(key)
    if m is None:
        return False
    name, field = m.groups()
    if name.startswith("-"):
        return True
    if field == "tagopt":
        return value not in _TAGOPT
    return field in _WORDS and value.startswith("-")


def check_config(pairs: list[tuple[str, str]], shown: str) -> None:
    named = sorted({k for k, v in pairs if _option_like(k, v)})
    if named:
        raise Unsafe(f"{shown} sets {', '.join(named[:8])}: a remote's or branch's name or value may not start with "
                     "'-' (git and gh hand them on to the commands they run, where they would be read as options)")
    bad = sorted({k for k, v in pairs if not _ALLOWED_KEYS.match(k) or (k in _VALUES and not _VALUES[k].match(v))})
    if bad:
        shown_keys = ", ".join(bad[:8]) + (" …" if len(bad) > 8 else "")
        raise Unsafe(f"{shown} sets {shown_keys}: host commands run git only with repository settings that name "
                     "no program, file or other repository (remote and branch settings, user name and email); "
                     "remove these keys from the repository's config, or run the command yourself")


def environment(base: dict[str, str], repo: tuple[str, str] | None) -> dict[str, str]:
    """The environment of a host command: the host's own, git pinned to the checked repository
    (or to none), the pins appended to any command-line configuration already there."""
    env = dict(base)
    env.update(ENV_PINS)
    if repo is None:
        env["GIT_DIR"] = "/dev/null/no-repository"  # nothing git could discover later was checked
        env.pop("GIT_WORK_TREE", None)
    else:
        env["GIT_WORK_TREE"], env["GIT_DIR"] = repo
    for k in ("GIT_COMMON_DIR", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_ALTERNATE_OBJECT_DIRECTORIES",
              "GIT_CEILING_DIRECTORIES", "GIT_NAMESPACE"):
        env.pop(k, None)
    try:
        n = int(env.get("GIT_CONFIG_COUNT", "0"))
    except ValueError:
        n = 0
    for key, value in PINS:
        env[f"GIT_CONFIG_KEY_{n}"], env[f"GIT_CONFIG_VALUE_{n}"] = key, value
        n += 1
    env["GIT_CONFIG_COUNT"] = str(n)
    return env
