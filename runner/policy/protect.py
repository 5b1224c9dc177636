"""Protected directories: places in the workspace no tool may write.

Two defences, both built from one list of workspace-relative paths:

- Docker: each protected path that exists (or is made) is bind-mounted read-only on top of the
  workspace mount, and its ancestors are bound onto themselves so they cannot be renamed
  (`mount_plan`): the kernel refuses writes and moves even from bash.
- Local executor, and the writing tools everywhere: `Guard.check_writable(path)` resolves the
  path (following symlinks) and refuses it when it lands in a protected directory, or when it
  is a hard link to a file that lives in one.

    dirs = protected_dirs(policy.protect, cli=["secrets"], environ=os.environ)
    guard = Guard(workspace, dirs)
    guard.check_writable("src/app.py")          # None
    guard.check_writable(".git/hooks/pre-commit")  # raises ProtectedPath
"""
from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Iterable

from ..errors import RunnerError
from ..untrusted.wspath import UnsafePath, make_dirs, open_dir, parts, relative

GIT_HOOKS = ".git/hooks"
# What makes the host's git run programs, or look for its configuration elsewhere: protected
# (read-only mounts, and path checks) whenever the workspace's git is (protect_git_hooks), so the
# user's own git on the host never runs a program the sandbox chose. `.git` itself is pinned as
# their parent. The sandbox's git still commits (objects, refs, index and logs stay writable).
GIT_PROTECTED = (GIT_HOOKS, ".git/config", ".git/config.worktree", ".git/commondir", ".git/modules",
                 ".git/worktrees")
ENV_PROTECT = "RUNNER_PROTECT_DIRS"
_HARDLINK_SCAN_LIMIT = 10_000  # entries looked at in all protected directories when a target has links
_DIR_NOFOLLOW = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class ProtectedPath(RunnerError):
    """A write into a protected directory. str() is the message for the tool result."""

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(f"path is in a protected directory: {path}")


class BadProtectPath(RunnerError, ValueError):
    """A protect entry that is not a path inside the workspace."""


def normalise(path: str, workspace: str | os.PathLike | None = None) -> str:
    """A protect entry as a clean workspace-relative posix path ('./a//b/' -> 'a/b').
    An absolute path is accepted when it lies inside `workspace`."""
    p = path.strip()
    if not p or "\x00" in p:
        raise BadProtectPath(f"bad protected path {path!r}")
    if p.startswith("/"):
        if workspace is None:
            raise BadProtectPath(f"protected path {path!r} is absolute: give it relative to the workspace")
        ws = Path(workspace).resolve()
        cand = Path(os.path.normpath(p))
        if not cand.is_relative_to(ws):
            cand = Path(os.path.realpath(cand))  # the operator's path; realpath never raises on a loop
        if not cand.is_relative_to(ws) or cand == ws:
            raise BadProtectPath(f"protected path {path!r} is not inside the workspace {ws}")
        p = str(cand.relative_to(ws))
    pp = PurePosixPath(p)
    if ".." in pp.parts:
        raise BadProtectPath(f"protected path {path!r} leaves the workspace ('..')")
    norm = str(pp)
    if norm == ".":
        raise BadProtectPath("protecting the whole workspace: mount it read-only instead (sandbox.workspace: ro)")
    return norm


def protected_dirs(policy_protect: Iterable[str] = (), cli: Iterable[str] = (), environ: dict[str, str] | None = None,
                   *, git_hooks: bool = True, workspace: str | os.PathLike | None = None) -> list[str]:
    """Every protected path, workspace-relative, in order, without duplicates: the git paths
    (GIT_PROTECTED, unless `git_hooks` is False), the policy's, `--protect` ones, then RUNNER_PROTECT_DIRS (colon-separated).
    Raises BadProtectPath for one that is not inside the workspace."""
    env = os.environ if environ is None else environ
    items = (list(GIT_PROTECTED) if git_hooks else []) + list(policy_protect) + list(cli)
    items += [p for p in env.get(ENV_PROTECT, "").split(":") if p.strip()]
    out: list[str] = []
    for p in items:
        n = normalise(p, workspace)
        if n not in out:
            out.append(n)
    return out


def policy_protected_dirs(policy, cli: Iterable[str] = (), environ: dict[str, str] | None = None,
                          workspace: str | os.PathLike | None = None) -> list[str]:
    """protected_dirs() for a Policy (its protect list and protect_git_hooks)."""
    return protected_dirs(policy.protect, cli, environ, git_hooks=policy.protect_git_hooks, workspace=workspace)


@dataclass(frozen=True)
class ProtectedMount:
    rel: str  # workspace-relative
    host: str  # the host path (no link on the way: checked component by component)
    container: str  # where it goes in the sandbox
    read_only: bool = True  # False: a pin (the directory bound onto itself, so it cannot move)


@dataclass(frozen=True)
class MountPlan:
    mounts: list[ProtectedMount]  # read-only mounts and pins, parents first
    missing: list[str]  # protected paths that do not exist and were not created: only path checks guard them
    created: list[str]  # directories made so that they could be mounted read-only


def _link_refused(rel: str, prefix: str) -> UnsafePath:
    what = "is" if prefix == rel else f"goes through {prefix}, which is"
    return UnsafePath(f"protected path {rel} {what} a symbolic link: the sandbox could swap it for another. "
                      "Protect the real path instead, or replace the link by what it points to")


def mount_plan(host_workspace: str | os.PathLike, container_workspace: str, dirs: Iterable[str], *,
               create: Iterable[str] = (), pin: Iterable[str] = (), pins_read_only: bool = False,
               owner: tuple[int, int] | None = None) -> MountPlan:
    """What to mount on top of the workspace so that `dirs` can be neither written nor moved.

    Each protected path that exists is bind-mounted read-only; each of its ancestors inside the
    workspace is bound onto itself (a pin): a mount point cannot be renamed or removed (EBUSY),
    so `mv src src_x && mkdir -p src/config` cannot put a writable copy where a protected path
    was. The paths in `pin` (sources of policy mounts in the workspace) are pinned with their
    ancestors. A protected path in `create` that is missing is made first (mkdir -p, no link
    followed, owned by `owner`). An ancestor that is a file (a `.git` file of a linked worktree)
    is mounted read-only itself. Nothing is followed: a link on the way raises UnsafePath."""
    ws = Path(host_workspace)
    cws = PurePosixPath(container_workspace)
    create = {normalise(c) for c in create}
    uid, gid = owner if owner else (None, None)
    ro: list[str] = []
    pins: list[str] = []
    missing: list[str] = []
    created: list[str] = []
    for rel in dirs:
        rel = normalise(rel)
        if rel in create:
            try:
                created += make_dirs(ws, rel, uid, gid)
            except UnsafePath as e:
                raise UnsafePath(f"protected path {rel}: {e}") from None
        names = parts(rel)
        for i in range(len(names)):
            prefix = "/".join(names[: i + 1])
            try:
                st = os.lstat(ws / prefix)
            except FileNotFoundError:
                missing.append(rel)
                break
            if stat.S_ISLNK(st.st_mode):
                raise _link_refused(rel, prefix)
            if i == len(names) - 1 or not stat.S_ISDIR(st.st_mode):
                ro.append(prefix)
                break
            pins.append(prefix)
    for rel in pin:
        names = parts(normalise(rel))
        for i in range(len(names)):
            prefix = "/".join(names[: i + 1])
            try:
                st = os.lstat(ws / prefix)
            except FileNotFoundError:
                raise UnsafePath(f"mount source {rel} does not exist in the workspace ({prefix} is missing)") from None
            if stat.S_ISLNK(st.st_mode):
                raise UnsafePath(f"mount source {rel}: {prefix} is a symbolic link: the controller does not follow "
                                 "links in the workspace (an earlier sandbox may have planted it)")
            pins.append(prefix)
            if not stat.S_ISDIR(st.st_mode):
                break

    def under(p: str, q: str) -> bool:
        return p == q or p.startswith(q + "/")

    ro = list(dict.fromkeys(r for r in ro if not any(r != o and under(r, o) for o in ro)))
    pins = list(dict.fromkeys(p for p in pins if not any(under(p, o) for o in ro)))
    mounts = [ProtectedMount(r, str(ws / r), str(cws / r)) for r in ro]
    mounts += [ProtectedMount(p, str(ws / p), str(cws / p), read_only=pins_read_only) for p in pins]
    mounts.sort(key=lambda m: (m.rel.count("/"), m.rel))
    missing = [r for r in dict.fromkeys(missing) if not any(under(r, o) for o in ro)]
    return MountPlan(mounts, missing, created)


class Guard:
    """Path checks for writes, for the local executor and for write/edit/apply_patch."""

    def __init__(self, workspace: str | os.PathLike, dirs: Iterable[str]) -> None:
        self.workspace = Path(workspace).resolve()
        self.dirs = [normalise(d, self.workspace) for d in dirs]
        # Both the lexical place and the real place of each protected directory count.
        self._places: list[tuple[str, Path]] = []
        for d in self.dirs:
            lexical = self.workspace / d
            for place in (lexical, Path(os.path.realpath(lexical))):
                if (d, place) not in self._places:
                    self._places.append((d, place))

    def check_writable(self, path: str | os.PathLike) -> None:
        """None when writing `path` is allowed; raises ProtectedPath when it is (or leads) into a
        protected directory. Relative paths are taken from the workspace."""
        p = Path(os.fspath(path))
        if not p.is_absolute():
            p = self.workspace / p
        lexical = Path(os.path.normpath(p))
        # Follows every symlink that exists, including the last component; only names are read
        # (readlink), never a file; a loop or a long chain ends the walk without raising.
        real = Path(os.path.realpath(p))
        for name, place in self._places:
            for cand in (lexical, real):
                if cand == place or cand.is_relative_to(place):
                    raise ProtectedPath(self._show(cand, name))
        self._check_hardlink(real)

    def is_writable(self, path: str | os.PathLike) -> bool:
        try:
            self.check_writable(path)
        except ProtectedPath:
            return False
        return True

    def _show(self, path: Path, name: str) -> str:
        try:
            return str(path.relative_to(self.workspace))
        except ValueError:
            return str(path)

    def _check_hardlink(self, real: Path) -> None:
        """A file with several links may be one that lives in a protected directory. Only a
        regular file in the workspace is looked at (never a host file a link of the sandbox's
        names), and each protected directory is walked from the workspace by descriptor, no link
        followed (`.runner/tools -> /` had every write walk the host's files and name the ones
        linked to its target), _HARDLINK_SCAN_LIMIT entries in all, directories too."""
        if relative(self.workspace, real) is None:
            return
        try:
            st = os.lstat(real)
        except OSError:
            return
        if st.st_nlink < 2 or not stat.S_ISREG(st.st_mode):
            return
        budget = [_HARDLINK_SCAN_LIMIT]
        for name, place in self._places:
            rel = relative(self.workspace, place)
            if rel is None:
                continue
            try:
                top = open_dir(self.workspace, rel)
            except (OSError, UnsafePath):  # missing, or a link on the way: nothing of it is reached
                continue
            fd, top.fd = top.fd, -1  # (_find_inode closes it)
            found = _find_inode(fd, rel, (st.st_ino, st.st_dev), budget)
            if found is not None:
                raise ProtectedPath(self._show(self.workspace / found, name))
            if budget[0] <= 0:
                return


def _find_inode(fd: int, rel: str, inode: tuple[int, int], budget: list[int]) -> "str | None":
    """The workspace-relative path of a file with this (st_ino, st_dev) under the directory fd
    (which is closed), links never followed (wspath.walk: any depth, two descriptors open); None
    if none within budget[0] entries (spent)."""
    from ..untrusted.wspath import walk

    try:
        for drel, name, es in walk(fd):
            budget[0] -= 1
            if budget[0] < 0:
                return None
            if not stat.S_ISDIR(es.st_mode) and (es.st_ino, es.st_dev) == inode:
                return f"{rel}/{drel}/{name}" if drel else f"{rel}/{name}"
    except OSError:  # moved under the walk (protected directories are read-only to the sandbox)
        return None
    return None


def check_writable(path: str | os.PathLike, workspace: str | os.PathLike, dirs: Iterable[str]) -> None:
    """Guard(workspace, dirs).check_writable(path) in one call."""
    Guard(workspace, dirs).check_writable(path)
