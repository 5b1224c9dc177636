"""Raw bytes into and out of a workspace on this machine, under the tools' path rules: relative
paths only, no '..', no link followed anywhere on the way, only regular files, bounded sizes (the
caller refuses a protected path first). runner serve's file routes and a local Runner's
put_file/get_file/list_files use them."""
from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from ..errors import RunnerError
from .wspath import UnsafePath, make_dirs, open_dir
from .wspath import parts as _parts

_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0)
_WRITE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class TooLarge(RunnerError):
    pass


NAME_MAX = 255  # bytes in one name (Linux filesystems; the kernel answers ENAMETOOLONG past it)


def parts(rel: str) -> list[str]:
    """The path's names under the tools' rules (wspath), none too long for a filesystem."""
    names = _parts(rel)
    for n in names:
        if len(os.fsencode(n)) > NAME_MAX:
            raise UnsafePath(f"{n[:40]}...: a name of more than {NAME_MAX} bytes")
    return names


def _split(rel: str) -> tuple[str, str]:
    names = parts(rel)
    if not names:
        raise UnsafePath(f"{rel!r}: name a file in the workspace")
    return "/".join(names[:-1]), names[-1]


def open_read(workspace: Path, rel: str, max_bytes: int):
    """A regular file opened for reading (binary; the caller closes it), of at most max_bytes
    when opened; UnsafePath, FileNotFoundError or TooLarge otherwise."""
    parent, name = _split(rel)
    with open_dir(workspace, parent) as d:
        try:
            fd = os.open(name, _READ, dir_fd=d.fd)
        except OSError:  # a link (ELOOP), a UNIX socket (ENXIO), ...: said by what the entry is
            st = _lstat(d.fd, name)
            if st is not None and stat.S_ISLNK(st.st_mode):
                raise UnsafePath(f"{rel} is a symbolic link: links in the workspace are not followed") from None
            if st is not None and not stat.S_ISREG(st.st_mode) and not stat.S_ISDIR(st.st_mode):
                raise UnsafePath(f"{rel} is not a regular file") from None
            raise
        f = os.fdopen(fd, "rb")
        try:
            st = os.fstat(f.fileno())
            if not stat.S_ISREG(st.st_mode):
                raise UnsafePath(f"{rel} is not a regular file")
            if st.st_size > max_bytes:
                raise TooLarge(f"{rel} has {st.st_size} bytes, more than the {max_bytes} this route sends")
            os.set_blocking(f.fileno(), True)
            return f
        except BaseException:
            f.close()
            raise


def write(workspace: Path, rel: str, data: bytes, owner: tuple[int, int] | None = None) -> None:
    """Write the file (made, or replaced atomically); a link or a non-file in the way is refused."""
    parent, name = _split(rel)
    uid, gid = owner or (None, None)
    make_dirs(workspace, parent, uid, gid) if parent else None
    with open_dir(workspace, parent) as d:
        st = _lstat(d.fd, name)
        if st is not None and not stat.S_ISREG(st.st_mode):
            kind = "a symbolic link" if stat.S_ISLNK(st.st_mode) else "not a regular file"
            raise UnsafePath(f"{rel} is {kind}: it is not replaced")
        tmp = f".{name}.runner-put-{os.getpid()}-{os.urandom(4).hex()}"
        fd = os.open(tmp, _WRITE, 0o644, dir_fd=d.fd)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                if uid is not None:
                    try:
                        os.fchown(f.fileno(), uid, gid)
                    except PermissionError:
                        pass
            os.rename(tmp, name, src_dir_fd=d.fd, dst_dir_fd=d.fd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=d.fd)
            except OSError:
                pass
            raise


def _lstat(dir_fd: int, name: str):
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None



def names(workspace: Path, rel: str) -> list[str]:
    """The names in a workspace directory (no link followed on the way), sorted, a directory's
    ending with '/'; FileNotFoundError, NotADirectoryError, PermissionError, UnsafePath otherwise."""
    names_ = parts(rel)
    if not names_:
        fd = os.open(os.fspath(workspace), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    else:
        with open_dir(workspace, "/".join(names_[:-1])) as d:
            st = _lstat(d.fd, names_[-1])
            if st is None:
                raise FileNotFoundError(errno.ENOENT, "no such file or directory", rel)
            if stat.S_ISLNK(st.st_mode):
                raise UnsafePath(f"{rel} is a symbolic link: links in the workspace are not followed")
            if not stat.S_ISDIR(st.st_mode):
                raise NotADirectoryError(errno.ENOTDIR, "not a directory", rel)
            fd = os.open(names_[-1], os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=d.fd)
    try:
        with os.scandir(fd) as it:
            return sorted(e.name + ("/" if e.is_dir(follow_symlinks=False) else "") for e in it)
    finally:
        os.close(fd)
