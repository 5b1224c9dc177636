"""Reading and replacing files without being fooled by a symlink swapped in after a check."""
from __future__ import annotations

import errno
import os
import stat
from typing import Optional

from .result import ToolError

_O_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
TEXT_SAMPLE = 8192


def open_read(real: str, shown: str) -> int:
    """An fd on the real path of a regular file; the last component must not be a link now."""
    try:
        fd = os.open(real, os.O_RDONLY | _O_NOFOLLOW | _O_CLOEXEC)
    except FileNotFoundError:
        raise ToolError(f"file not found: {shown}") from None
    except IsADirectoryError:
        raise ToolError(f"{shown} is a directory: use ls to list it") from None
    except PermissionError:
        raise ToolError(f"permission denied reading {shown}") from None
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise ToolError(f"{shown} changed into a symbolic link while being read; try again") from None
        raise ToolError(f"cannot read {shown}: {e.strerror}") from None
    st = os.fstat(fd)
    if stat.S_ISDIR(st.st_mode):
        os.close(fd)
        raise ToolError(f"{shown} is a directory: use ls to list it")
    return fd


def read_bytes(real: str, shown: str, limit: Optional[int] = None) -> bytes:
    fd = open_read(real, shown)
    try:
        with os.fdopen(fd, "rb") as f:
            return f.read() if limit is None else f.read(limit)
    except OSError as e:
        raise ToolError(f"cannot read {shown}: {e.strerror}") from None


def looks_binary(sample: bytes) -> bool:
    """A NUL, or over 10 % of bytes that are neither text controls nor valid UTF-8."""
    if not sample:
        return False
    if b"\x00" in sample:
        return True
    bad = sum(1 for b in sample if b < 32 and b not in (9, 10, 12, 13, 8, 27, 11)) + sample.count(b"\x7f")
    try:
        sample.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.start < len(sample) - 4:  # not merely a character cut at the sample's end
            text = sample.decode("utf-8", "replace")
            bad += text.count("\ufffd")
    return bad * 10 > len(sample)


def _chown_like(fd: int, st: Optional[os.stat_result], parent: str) -> None:
    """Running as root, a replaced or new file keeps the owner of what it replaces (or of
    its directory), so files in the workspace belong to the workspace's owner."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return
    try:
        ref = st if st is not None else os.stat(parent)
        os.fchown(fd, ref.st_uid, ref.st_gid)
    except OSError:
        pass


def make_parents(ctx, real_dir: str) -> None:
    """Create missing directories (owned like their parent when running as root)."""
    missing = []
    d = real_dir
    while not os.path.isdir(d):
        missing.append(d)
        parent = os.path.dirname(d)
        if parent == d:
            break
        d = parent
    for m in reversed(missing):
        try:
            os.mkdir(m)
        except FileExistsError:
            if not os.path.isdir(m):
                raise ToolError(f"cannot create directory {m}: a file with that name exists") from None
            continue
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            try:
                st = os.stat(os.path.dirname(m))
                os.chown(m, st.st_uid, st.st_gid)
            except OSError:
                pass


def atomic_write(real: str, data: bytes, shown: str) -> bool:
    """Replace `real` with `data` through a temp file in the same directory; the mode (and,
    as root, the owner) of an existing file is kept. Returns True when the file is new."""
    parent = os.path.dirname(real)
    try:
        st: Optional[os.stat_result] = os.stat(real)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise ToolError(f"cannot write {shown}: {e.strerror}") from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise ToolError(f"{shown} is a directory: give a file path")
    mode = stat.S_IMODE(st.st_mode) if st is not None else 0o666 & ~_umask()
    tmp = None
    fd = -1
    for n in range(100):
        tmp = os.path.join(parent, ".%s.runner-%d-%d.tmp" % (os.path.basename(real)[:100], os.getpid(), n))
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC, 0o600)
            break
        except FileExistsError:
            continue
        except PermissionError:
            raise ToolError(f"permission denied writing {shown}") from None
        except OSError as e:
            raise ToolError(f"cannot write {shown}: {e.strerror}") from None
    if fd < 0:
        raise ToolError(f"cannot write {shown}: no free temporary name in its directory")
    try:
        try:
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            os.fchmod(fd, mode)
            _chown_like(fd, st, parent)
        finally:
            os.close(fd)
        os.replace(tmp, real)
    except OSError as e:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if e.errno == errno.ENOSPC:
            raise ToolError(f"cannot write {shown}: no space left on the device") from None
        raise ToolError(f"cannot write {shown}: {e.strerror}") from None
    return st is None


def _umask() -> int:
    mask = os.umask(0o22)
    os.umask(mask)
    return mask
