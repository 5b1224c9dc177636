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
from typing import Callable, Iterator, NamedTuple

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


# Trees the sandbox or a tenant wrote: measured and removed without recursion, by directory
# descriptor, never through a link, never into another filesystem, whatever their depth. Only two
# descriptors are open at a time: the walk climbs back with "..", checked against the identity
# (device, inode) it noted on the way down, so a directory moved meanwhile stops the walk
# instead of leading it elsewhere.

BLOCK = 4096  # what any entry costs on disk at least: an inode and its directory entry, a block


class TreeMoved(RunnerError, OSError):
    """The tree changed under a walk (a directory moved while the walk was in it)."""


class _Walk:
    """One open directory of a walk and the identities of the ones above it. Takes `top`, a
    path or an open directory descriptor (which it then owns and closes)."""

    def __init__(self, top: str | os.PathLike | int) -> None:
        self.fd = top if isinstance(top, int) else os.open(os.fspath(top), _DIR_FLAGS)
        st = os.fstat(self.fd)
        self.dev = st.st_dev
        self.ids = [(st.st_dev, st.st_ino)]

    def enter(self, name: str) -> str | None:
        """Into the subdirectory `name`: None, or why not (no directory of this filesystem now)."""
        try:
            fd = os.open(name, _DIR_FLAGS, dir_fd=self.fd)
        except OSError as e:
            return e.strerror or str(e)
        st = os.fstat(fd)
        if st.st_dev != self.dev:  # a mount point: not part of the tree
            os.close(fd)
            return "another filesystem is mounted there"
        os.close(self.fd)
        self.fd = fd
        self.ids.append((st.st_dev, st.st_ino))
        return None

    def leave(self) -> None:
        fd = os.open("..", _DIR_FLAGS, dir_fd=self.fd)
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != self.ids[-2]:
            os.close(fd)
            raise TreeMoved(errno.ESTALE, "a directory moved while the walk was in it")
        os.close(self.fd)
        self.fd = fd
        self.ids.pop()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def walk(top: str | os.PathLike | int, prune: Callable[[str], bool] | None = None,
         skipped: Callable[[str, str], None] | None = None) -> Iterator[tuple[str, str, os.stat_result]]:
    """(directory relative to top, '' for top itself; name; lstat) of every entry under `top` (a
    path, or an open directory descriptor the walk then owns), depth first. No link is followed,
    no other filesystem entered, and the depth costs neither stack nor descriptors (two are open
    at a time: the walk climbs back with "..", checked against the identity it noted on the way
    down, and raises TreeMoved when a directory moved meanwhile). A directory whose relative path
    `prune` answers True for is yielded but not entered. A directory that cannot be entered or
    listed (no permission, another filesystem, gone) is skipped: `skipped(path, why)` is told
    (it may raise). Directory names are held per level while its subdirectories are walked."""
    w = _Walk(top)
    names: list[str] = []

    def scan() -> Iterator[tuple[str, str, os.stat_result]]:
        rel = "/".join(names)
        subdirs: list[str] = []
        try:
            it = os.scandir(w.fd)
        except OSError as e:
            if skipped:
                skipped(rel, e.strerror or str(e))
            return subdirs
        with it:
            for e in it:
                try:
                    st = os.stat(e.name, dir_fd=w.fd, follow_symlinks=False)
                except OSError:
                    continue
                yield rel, e.name, st
                if stat.S_ISDIR(st.st_mode) and not (prune and prune(f"{rel}/{e.name}" if rel else e.name)):
                    subdirs.append(e.name)
        return subdirs

    try:
        stack = [(yield from scan())]
        while stack:
            if stack[-1]:
                name = stack[-1].pop()
                why = w.enter(name)
                if why is None:
                    names.append(name)
                    stack.append((yield from scan()))
                elif skipped:
                    skipped("/".join([*names, name]), why)
                continue
            stack.pop()
            if stack:
                w.leave()
                names.pop()
    finally:
        w.close()


BLOCK = 4096  # what any entry costs on disk at least: an inode and its directory entry, a block


def _charge(st: os.stat_result) -> int:
    size = st.st_size if stat.S_ISREG(st.st_mode) else 0
    return max(size, st.st_blocks * 512, BLOCK)


class Usage(NamedTuple):
    """What a tree takes, every entry charged at least BLOCK bytes; `complete` is False when the
    walk stopped early (past its bound, a directory it could not enter, the tree moved under it)."""

    used: int
    entries: int
    complete: bool


def usage(root: str | os.PathLike, stop_after: int | None = None) -> Usage:
    """What the tree under root takes on disk: every entry (file, directory, link, FIFO, socket)
    counts its apparent size or its allocated blocks, whichever is more, and at least BLOCK
    bytes (so inodes are bounded with bytes); a file hard-linked several times counts once; root
    itself counts nothing. Stops once past `stop_after`: at most stop_after / BLOCK + 1 entries
    are looked at. Walked by `walk` (no link followed, any depth); not complete when a directory
    could not be entered (its contents are not counted) or moved under the walk."""
    total = entries = 0
    seen: set[tuple[int, int]] = set()
    hidden: list[str] = []
    try:
        for _, _, st in walk(root, skipped=lambda path, why: hidden.append(path)):
            entries += 1
            if st.st_nlink > 1 and not stat.S_ISDIR(st.st_mode):
                if (st.st_dev, st.st_ino) in seen:
                    continue
                seen.add((st.st_dev, st.st_ino))
            total += _charge(st)
            if stop_after is not None and total > stop_after:
                return Usage(total, entries, False)
    except OSError as e:  # the root missing: nothing; moved under the walk: not complete
        return Usage(total, entries, not isinstance(e, TreeMoved))
    return Usage(total, entries, not hidden)


def remove_tree(root: str | os.PathLike, batch: int = 1000) -> str | None:
    """Remove root and everything under it; None when it is gone, else why not (never raises).
    A link is removed, never followed; another filesystem mounted inside is not entered (and so
    stays, with the directories above it). Directory names are held `batch` at a time per level."""
    root = os.fspath(root)
    try:
        st = os.lstat(root)
    except FileNotFoundError:
        return None
    except OSError as e:
        return f"{root}: {e.strerror}"
    if not stat.S_ISDIR(st.st_mode):
        try:
            os.unlink(root)
            return None
        except OSError as e:
            return f"{root}: {e.strerror}"
    try:
        walk = _Walk(root)
    except OSError as e:
        return f"{root}: {e.strerror}"
    problems: list[str] = []

    def note(what: str) -> None:
        if len(problems) < 5:
            problems.append(what)

    def scan(stuck: set[str]) -> tuple[list[str], bool]:
        """Unlink what is no directory; the subdirectories to go through (up to batch), and
        whether more may be left after them."""
        subdirs = []
        with os.scandir(walk.fd) as it:
            for e in it:
                if e.name in stuck:
                    continue
                try:
                    is_dir = e.is_dir(follow_symlinks=False)
                    if not is_dir:
                        os.unlink(e.name, dir_fd=walk.fd)
                        continue
                except OSError as err:
                    stuck.add(e.name)
                    note(f"{e.name}: {err.strerror}")
                    continue
                if len(subdirs) >= batch:
                    return subdirs, True
                subdirs.append(e.name)
        return subdirs, False

    try:
        stuck: set[str] = set()
        names, more = scan(stuck)
        stack = [(names, more, stuck)]
        current: list[str] = []  # the names entered, one per level below root
        while stack:
            names, more, stuck = stack[-1]
            if names:
                name = names.pop()
                try:
                    os.rmdir(name, dir_fd=walk.fd)  # empty already: one call, no descent
                    continue
                except OSError:
                    pass
                why = walk.enter(name)
                if why is None:
                    current.append(name)
                    sub: set[str] = set()
                    stack.append((*scan(sub), sub))
                else:
                    stuck.add(name)
                    note(f"{'/'.join([*current, name])}: {why}")
                continue
            if more:  # a batch done: list the rest
                stack[-1] = (*scan(stuck), stuck)
                continue
            stack.pop()
            if not stack:
                break
            walk.leave()
            name = current.pop()
            try:
                os.rmdir(name, dir_fd=walk.fd)
            except OSError as err:
                stack[-1][2].add(name)
                note(f"{name}: {err.strerror}")
    except TreeMoved:
        note("a directory moved while it was being removed")
    except OSError as err:
        note(f"{err.filename or ''}: {err.strerror}")
    finally:
        walk.close()
    if not problems:
        try:
            os.rmdir(root)
        except FileNotFoundError:
            pass
        except OSError as err:
            note(f"{root}: {err.strerror}")
    return f"{root} not wholly removed: " + "; ".join(problems) if problems else None
