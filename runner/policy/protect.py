"""Protected directories: places in the workspace no tool may write.

Two defences, both built from one list of workspace-relative paths:

- Docker: each protected path that exists is bind-mounted read-only on top of the workspace
  mount (`readonly_mounts`), so the kernel refuses writes even from bash.
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
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Iterable

GIT_HOOKS = ".git/hooks"
ENV_PROTECT = "RUNNER_PROTECT_DIRS"
_HARDLINK_SCAN_LIMIT = 10_000  # files looked at per protected directory when a target has links


class ProtectedPath(Exception):
    """A write into a protected directory. str() is the message for the tool result."""

    def __init__(self, path: str) -> None:
        self.path = path
        super().__init__(f"path is in a protected directory: {path}")


class BadProtectPath(ValueError):
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
            cand = cand.resolve()
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
    """Every protected path, workspace-relative, in order, without duplicates: .git/hooks (unless
    `git_hooks` is False), the policy's, `--protect` ones, then RUNNER_PROTECT_DIRS (colon-separated).
    Raises BadProtectPath for one that is not inside the workspace."""
    env = os.environ if environ is None else environ
    items = ([GIT_HOOKS] if git_hooks else []) + list(policy_protect) + list(cli)
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
    rel: str  # as configured
    host: str  # real host path (symlinks resolved) to bind read-only
    container: str  # where it goes in the sandbox

    def to_mount(self):
        """An executors Mount, read-only (imports the docker backend's config module only now)."""
        from executors.docker.config import Mount

        return Mount(source=self.host, target=self.container, read_only=True)


@dataclass(frozen=True)
class MountPlan:
    mounts: list[ProtectedMount]
    missing: list[str]  # protected paths that do not exist (and no mount covers): only path checks guard them
    outside: list[str]  # paths whose real location is outside the workspace: not reachable anyway


def readonly_mounts(host_workspace: str | os.PathLike, container_workspace: str, dirs: Iterable[str]) -> MountPlan:
    """What to mount read-only on top of the workspace so that `dirs` cannot be written.

    A protected path that is a symlink is followed: the real directory is protected, at its
    real place in the sandbox (a link to somewhere inside the workspace protects its target; a
    link leading out is reported in `outside`, since the sandbox cannot reach it unless mounted).
    A path inside another protected one needs no mount of its own."""
    ws = Path(host_workspace).resolve()
    cws = PurePosixPath(container_workspace)
    mounts: list[ProtectedMount] = []
    missing: list[str] = []
    outside: list[str] = []
    seen: list[Path] = []
    for rel in dirs:
        rel = normalise(rel, ws)
        real = (ws / rel).resolve()
        if not real.is_relative_to(ws) or real == ws:
            outside.append(rel)
            continue
        if not os.path.lexists(ws / rel) or not real.exists():
            missing.append(rel)
            continue
        seen.append(real)
        mounts.append(ProtectedMount(rel, str(real), str(cws / real.relative_to(ws).as_posix())))
    # Drop mounts nested inside another protected mount (the outer one already covers them).
    keep = [m for m in mounts if not any(Path(m.host) != s and Path(m.host).is_relative_to(s) for s in seen)]
    dedup: list[ProtectedMount] = []
    for m in sorted(keep, key=lambda m: m.container.count("/")):
        if all(m.host != d.host for d in dedup):
            dedup.append(m)
    # A missing path under a mounted one is covered by that mount.
    missing = [r for r in missing if not any((ws / r).resolve().is_relative_to(s) for s in seen)]
    return MountPlan(dedup, missing, outside)


class Guard:
    """Path checks for writes, for the local executor and for write/edit/apply_patch."""

    def __init__(self, workspace: str | os.PathLike, dirs: Iterable[str]) -> None:
        self.workspace = Path(workspace).resolve()
        self.dirs = [normalise(d, self.workspace) for d in dirs]
        # Both the lexical place and the real place of each protected directory count.
        self._places: list[tuple[str, Path]] = []
        for d in self.dirs:
            lexical = self.workspace / d
            for place in (lexical, lexical.resolve()):
                if (d, place) not in self._places:
                    self._places.append((d, place))

    def check_writable(self, path: str | os.PathLike) -> None:
        """None when writing `path` is allowed; raises ProtectedPath when it is (or leads) into a
        protected directory. Relative paths are taken from the workspace."""
        p = Path(os.fspath(path))
        if not p.is_absolute():
            p = self.workspace / p
        lexical = Path(os.path.normpath(p))
        real = p.resolve()  # follows every symlink that exists, including the last component
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
        """A file with several links may be one that lives in a protected directory."""
        try:
            st = real.stat()
        except OSError:
            return
        if st.st_nlink < 2 or not real.is_file():
            return
        for name, place in self._places:
            if not place.is_dir():
                continue
            n = 0
            for root, _dirs, files in os.walk(place):
                for f in files:
                    n += 1
                    if n > _HARDLINK_SCAN_LIMIT:
                        break
                    try:
                        fs = os.lstat(os.path.join(root, f))
                    except OSError:
                        continue
                    if (fs.st_ino, fs.st_dev) == (st.st_ino, st.st_dev):
                        raise ProtectedPath(self._show(Path(root) / f, name))


def check_writable(path: str | os.PathLike, workspace: str | os.PathLike, dirs: Iterable[str]) -> None:
    """Guard(workspace, dirs).check_writable(path) in one call."""
    Guard(workspace, dirs).check_writable(path)
