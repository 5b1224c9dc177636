"""Workspace paths on the controller, walked without following links.

The workspace is hostile: any part of it may be a symlink, a FIFO, a socket or a loop that the
sandbox left there. The controller therefore reaches a workspace path one component at a time,
from a directory descriptor, with O_NOFOLLOW: a link anywhere on the way is refused (never
followed), a component that is not a directory stops the walk, and a file is read only when it
is a regular file, up to a bound, opened with O_NONBLOCK so a FIFO or a device never blocks.

    host = inside(ws, "cache")                    # Path, or raises UnsafePath naming the link
    with open_dir(ws, "tools") as d:              # DirFd, or raises UnsafePath
        for name, st in d.entries(limit=1000):    # lstat results, nothing followed
            head = d.read_head(name, 65536)       # bytes of a regular file, else None
"""
from __future__ import annotations

import errno
import os
import stat
from pathlib import Path, PurePosixPath

from ..errors import RunnerError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)


class UnsafePath(RunnerError, ValueError):
    """A workspace path the controller will not use; str() says which part and why."""


def parts(rel: str | os.PurePath) -> list[str]:
    """The components of a workspace-relative path; '..', absolute paths and NUL refused."""
    s = os.fspath(rel)
    if "\x00" in s:
        raise UnsafePath(f"bad path {s!r}: NUL byte")
    p = PurePosixPath(s)
    if p.is_absolute():
        raise UnsafePath(f"{s}: give it relative to the workspace")
    if ".." in p.parts:
        raise UnsafePath(f"{s}: leaves the workspace ('..')")
    return [c for c in p.parts if c != "."]


def relative(workspace: Path, path: str | os.PathLike) -> str | None:
    """`path` (absolute, or relative to the workspace) as a workspace-relative posix path when it
    lies lexically inside the workspace ('' for the workspace itself), else None."""
    p = Path(os.path.normpath(Path(workspace) / os.fspath(path)))
    ws = Path(workspace)
    if p == ws:
        return ""
    return p.relative_to(ws).as_posix() if p.is_relative_to(ws) else None


def _step(fd: int, name: str, shown: str) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=fd)
    except OSError as e:
        try:
            st = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError:
            raise e from None
        if stat.S_ISLNK(st.st_mode):
            raise UnsafePath(f"{shown} is a symbolic link: the controller does not follow links in the workspace "
                             "(the sandbox can make or swap them)") from None
        if not stat.S_ISDIR(st.st_mode):
            raise UnsafePath(f"{shown} is not a directory") from None
        raise


class DirFd:
    """An open workspace directory (a context manager): entries and bounded reads relative to it."""

    def __init__(self, fd: int, shown: str) -> None:
        self.fd = fd
        self.shown = shown

    def __enter__(self) -> "DirFd":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def entries(self, limit: int = 10_000) -> list[tuple[str, os.stat_result]]:
        """(name, lstat) of at most `limit` entries, sorted by name; nothing is followed."""
        out = []
        with os.scandir(self.fd) as it:
            for e in it:
                if len(out) >= limit:
                    break
                try:
                    out.append((e.name, os.stat(e.name, dir_fd=self.fd, follow_symlinks=False)))
                except OSError:
                    continue
        return sorted(out, key=lambda x: x[0])

    def read_head(self, name: str, limit: int) -> bytes | None:
        """Up to `limit` bytes of `name` when it is a regular file (not through a link), else None."""
        try:
            fd = os.open(name, _FILE_FLAGS, dir_fd=self.fd)
        except OSError:
            return None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None
            chunks, left = [], limit
            while left > 0:
                data = os.read(fd, min(left, 65536))
                if not data:
                    break
                chunks.append(data)
                left -= len(data)
            return b"".join(chunks)
        except OSError:
            return None
        finally:
            os.close(fd)


def open_dir(workspace: str | os.PathLike, rel: str | os.PurePath) -> DirFd:
    """The directory `rel` of the workspace, reached without following any link. Raises
    UnsafePath (a link or a non-directory on the way) or OSError (missing, unreadable)."""
    names = parts(rel)
    fd = os.open(os.fspath(workspace), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    done: list[str] = []
    try:
        for name in names:
            done.append(name)
            nfd = _step(fd, name, "/".join(done))
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return DirFd(fd, "/".join(done) or ".")


def lstat_chain(workspace: str | os.PathLike, rel: str | os.PurePath) -> list[tuple[str, os.stat_result | None]]:
    """[(prefix, lstat or None when missing)] for every prefix of `rel`, from the first component.
    Raises UnsafePath when a component before the last is a link or not a directory (the
    last one may be anything: the caller decides)."""
    ws = Path(workspace)
    out: list[tuple[str, os.stat_result | None]] = []
    names = parts(rel)
    for i in range(len(names)):
        prefix = "/".join(names[: i + 1])
        try:
            st = os.lstat(ws / prefix)
        except FileNotFoundError:
            out += [("/".join(names[: j + 1]), None) for j in range(i, len(names))]
            return out
        except OSError as e:
            raise UnsafePath(f"{prefix}: {e.strerror}") from None
        out.append((prefix, st))
        if i < len(names) - 1:
            if stat.S_ISLNK(st.st_mode):
                raise UnsafePath(f"{prefix} is a symbolic link: the controller does not follow links in the "
                                 "workspace (the sandbox can make or swap them)")
            if not stat.S_ISDIR(st.st_mode):
                raise UnsafePath(f"{prefix} is not a directory")
    return out


def inside(workspace: str | os.PathLike, rel: str | os.PurePath, *, kind: str = "any") -> Path:
    """The host path of an existing workspace path, checked component by component without
    following links (the last component too). `kind` "dir" or "file" also requires that.
    Raises UnsafePath with a message naming the offending part, FileNotFoundError when missing."""
    chain = lstat_chain(workspace, rel)
    if not chain:
        return Path(workspace)
    prefix, st = chain[-1]
    if st is None:
        raise FileNotFoundError(errno.ENOENT, "no such file or directory in the workspace", prefix)
    if stat.S_ISLNK(st.st_mode):
        raise UnsafePath(f"{prefix} is a symbolic link: the controller does not follow links in the workspace "
                         "(the sandbox can make or swap them)")
    if kind == "dir" and not stat.S_ISDIR(st.st_mode):
        raise UnsafePath(f"{prefix} is not a directory")
    if kind == "file" and not stat.S_ISREG(st.st_mode):
        raise UnsafePath(f"{prefix} is not a regular file")
    return Path(workspace) / prefix


def make_dirs(workspace: str | os.PathLike, rel: str | os.PurePath, uid: int | None = None,
              gid: int | None = None) -> list[str]:
    """mkdir -p of `rel` in the workspace without following links, each new directory owned by
    uid:gid (the workspace owner). Answers the prefixes it created. Raises UnsafePath when a
    component is a link or not a directory."""
    made: list[str] = []
    done: list[str] = []
    fd = os.open(os.fspath(workspace), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in parts(rel):
            done.append(name)
            shown = "/".join(done)
            try:
                os.mkdir(name, 0o755, dir_fd=fd)
                made.append(shown)
            except FileExistsError:
                pass
            nfd = _step(fd, name, shown)
            os.close(fd)
            fd = nfd
            if made and made[-1] == shown and uid is not None:
                try:
                    os.fchown(fd, uid, -1 if gid is None else gid)
                except PermissionError:
                    pass  # not root: it is ours already
    finally:
        os.close(fd)
    return made


def touches(workspace: str | os.PathLike, path: str | os.PathLike, max_links: int = 40) -> bool:
    """Whether resolving `path` (an operator's path) passes through the workspace at any step: a
    prefix, or a link's target on the way, lies in it. Only names are read (lstat, readlink);
    too many links count as touching."""
    ws = Path(os.path.realpath(workspace))
    todo = list(PurePosixPath(os.path.abspath(os.fspath(path))).parts[1:])
    cur = Path("/")
    links = 0
    while todo:
        name = todo.pop(0)
        if name in ("", "."):
            continue
        if name == "..":
            cur = cur.parent
            continue
        nxt = cur / name
        if nxt == ws or nxt.is_relative_to(ws):
            return True
        try:
            is_link = stat.S_ISLNK(os.lstat(nxt).st_mode)
        except OSError:
            return False
        if not is_link:
            cur = nxt
            continue
        links += 1
        if links > max_links:
            return True
        target = PurePosixPath(os.readlink(nxt))
        if target.is_absolute():
            cur = Path("/")
            todo = list(target.parts[1:]) + todo
        else:
            todo = list(target.parts) + todo
    return False
