"""Small file helpers shared by the file tools: text detection and atomic replacement; and the
temp dir, temp files and `which` of the agent's shells, without tempfile and shutil: with what
they import (random, bz2, lzma, zlib, weakref) they were 5-6 ms of the CPU and 0.56 MiB of every
sandbox (runner/base, `--cpus 1`, measured), for four functions the agent uses."""
from __future__ import annotations

import os
import threading

from .context import ToolError

# Reading the umask means setting it for a moment: a process started on another thread in that
# moment (procs.py's spare shell) would inherit the wrong one. Both hold this lock.
UMASK_LOCK = threading.Lock()


def current_umask() -> int:
    with UMASK_LOCK:
        mask = os.umask(0)
        os.umask(mask)
    return mask

_NAME_TRIES = 100  # names tried for a new file before giving up (each has 64 random bits)


def _random_name(prefix: str, suffix: str) -> str:
    return f"{prefix}{os.urandom(8).hex()}{suffix}"


def mkstemp(directory: str, prefix: str = "tmp", suffix: str = "") -> tuple[int, str]:
    """tempfile.mkstemp(suffix, prefix, directory): a new file of a random name, 0600, opened
    read-write (O_EXCL, never through a symlink); (descriptor, path)."""
    for _ in range(_NAME_TRIES):
        path = os.path.join(directory, _random_name(prefix, suffix))
        try:
            return os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600), path
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name in {directory}")


def unnamed_file(directory: str) -> int:
    """tempfile.TemporaryFile(dir=directory)'s descriptor: a file with no name (O_TMPFILE, or a
    named one removed at once where the file system cannot)."""
    try:  # O_EXCL: it can never be given a name (linkat through /proc/PID/fd), as tempfile's
        return os.open(directory, os.O_RDWR | os.O_TMPFILE | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except (AttributeError, OSError):
        fd, path = mkstemp(directory)
        os.unlink(path)
        return fd


_tempdir: "str | None" = None


def tempdir() -> str:
    """tempfile.gettempdir(): the first of $TMPDIR, $TEMP, $TMP, /tmp, /var/tmp, /usr/tmp and the
    working directory where a file can be made; looked for once."""
    global _tempdir
    if _tempdir is None:
        env = [os.environ.get(name) for name in ("TMPDIR", "TEMP", "TMP")]
        for candidate in [*(c for c in env if c), "/tmp", "/var/tmp", "/usr/tmp", None]:
            try:  # None: the working directory, last (it may be gone)
                directory = os.getcwd() if candidate is None else os.path.abspath(candidate)
                fd, path = mkstemp(directory)
            except OSError:
                continue
            os.close(fd)
            os.unlink(path)
            _tempdir = directory
            break
        else:
            raise FileNotFoundError("no usable temporary directory")
    return _tempdir


def which(name: str) -> "str | None":
    """shutil.which(name): the first executable file of that name on $PATH."""
    path = os.environ.get("PATH")
    if path is None:
        try:
            path = os.confstr("CS_PATH") or os.defpath
        except (AttributeError, ValueError):
            path = os.defpath
    if not path:  # (an empty PATH names no directory, not the working one)
        return None
    seen = set()
    for directory in path.split(os.pathsep):
        if directory in seen:
            continue
        seen.add(directory)
        candidate = os.path.join(directory, name)
        if os.access(candidate, os.X_OK) and not os.path.isdir(candidate):
            return candidate
    return None


IMAGE_TYPES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".gif": "image/gif", ".webp": "image/webp"}
TEXT_BYTES = set(range(32, 127)) | {8, 9, 10, 12, 13, 27}


def looks_binary(head: bytes) -> bool:
    """A NUL, or over 10 % bytes that are neither printable ASCII nor part of valid UTF-8."""
    if not head:
        return False
    if b"\x00" in head:
        return True
    try:
        head.decode("utf-8")
        return False
    except UnicodeDecodeError as e:
        if e.start >= len(head) - 4:  # a character cut by the 8 KiB window
            return False
    odd = sum(1 for b in head if b not in TEXT_BYTES and b < 128) + sum(1 for b in head if b >= 128) // 2
    return odd > len(head) // 10


def atomic_write(real: str, data: bytes, keep_mode_of: str | None = None, replace: bool = True) -> None:
    """Write data to a temp file in the same directory, then rename over `real`. replace=False:
    link it in place instead, which fails with FileExistsError if `real` exists (never replaced).
    On any failure (a full disk, say) nothing is left: neither the temp file nor a directory made
    for it."""
    staged = stage(real, data, keep_mode_of)
    try:
        commit(staged, replace)
    except BaseException:
        discard(staged)
        raise


def _make_parents(parent: str) -> list[str]:
    """Create parent and its missing ancestors; return the ones made, outermost first."""
    missing = []
    d = parent
    while d and not os.path.isdir(d):
        missing.append(d)
        d = os.path.dirname(d)
    made = []
    try:
        for d in reversed(missing):
            os.mkdir(d)
            made.append(d)
    except FileExistsError:
        pass
    except BaseException:
        _remove_dirs(made)
        raise
    return made


def _remove_dirs(made: list[str]) -> None:
    for d in reversed(made):
        try:
            os.rmdir(d)
        except OSError:
            pass


def stage(real: str, data: bytes, keep_mode_of: str | None = None) -> tuple[str, str, list[str]]:
    """The first half of atomic_write: (temp file holding data, real, directories made). Staging
    every file of a change before committing any keeps a change that cannot be written whole
    (a full disk) from being half applied."""
    parent = os.path.dirname(real)
    made = _make_parents(parent)
    mode = None
    src = keep_mode_of or real
    try:
        mode = os.stat(src).st_mode & 0o7777
    except FileNotFoundError:
        pass
    try:
        fd, tmp = mkstemp(parent, prefix=".runner-", suffix=".tmp")
    except BaseException:
        _remove_dirs(made)
        raise
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        if mode is not None:
            os.chmod(tmp, mode)
        else:
            os.chmod(tmp, 0o666 & ~current_umask())
    except BaseException:
        discard((tmp, real, made))
        raise
    return tmp, real, made


def commit(staged: tuple[str, str, list[str]], replace: bool = True) -> None:
    tmp, real, _ = staged
    parent = os.path.dirname(real)
    if os.path.realpath(parent) != parent:
        raise ToolError(f"the directory {parent} changed while writing; nothing was written")
    if replace:
        os.replace(tmp, real)
    else:
        os.link(tmp, real, follow_symlinks=False)
        os.unlink(tmp)


def discard(staged: tuple[str, str, list[str]]) -> None:
    tmp, _, made = staged
    try:
        os.unlink(tmp)
    except OSError:
        pass
    _remove_dirs(made)


def decode(data: bytes) -> tuple[str, bool, str]:
    """(text without BOM, had_bom, newline) — newline is '\\r\\n' when the file uses CRLF."""
    bom = data.startswith(b"\xef\xbb\xbf")
    text = data[3:].decode("utf-8", errors="replace") if bom else data.decode("utf-8", errors="replace")
    newline = "\r\n" if "\r\n" in text else "\n"
    return text, bom, newline


def encode(text: str, bom: bool, newline: str) -> bytes:
    if newline == "\r\n":
        text = text.replace("\r\n", "\n").replace("\n", "\r\n")
    return (b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8")


def walk(top: str):
    """os.walk(top) (top-down, `dirnames` may be pruned in place, a link to a directory listed
    among them but not entered) without recursion: Python 3.11's os.walk recurses and raised
    RecursionError past ~1000 levels, a depth the workspace may hold. Directories that cannot
    be listed are skipped, as os.walk does."""
    stack = [top]
    while stack:
        path = stack.pop()
        dirnames, filenames, links = [], [], set()
        try:
            with os.scandir(path) as it:
                for e in it:
                    try:
                        is_dir = e.is_dir()
                    except OSError:
                        is_dir = False
                    (dirnames if is_dir else filenames).append(e.name)
                    if is_dir and e.is_symlink():
                        links.add(e.name)
        except OSError:
            continue
        yield path, dirnames, filenames
        stack.extend(os.path.join(path, d) for d in reversed(dirnames) if d not in links)
