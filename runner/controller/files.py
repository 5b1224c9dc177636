"""A Runner's file operations (put_file, get_file, list_files), as RemoteRunner has them over
`runner serve`: paths relative to the workspace ('..' and absolute paths refused), a protected
path refused as a write of the tools is. A workspace on this machine is used as runner serve's
file routes use it (runner/untrusted/wsfiles.py: no link followed anywhere, regular files only);
one on another machine (ssh) through the sandbox's executor, as the sandbox's user. Errors are
the built-in FileNotFoundError, IsADirectoryError, NotADirectoryError and PermissionError, naming
the path; UnsafePath (a RunnerError and a ValueError) for a path the tools' rules refuse.
"""
from __future__ import annotations

import errno
import posixpath

from ..errors import RunnerError

# list_files in the sandbox: one NUL-ended name per entry, a directory's (not a link's) with '/'
LIST_FILES = r"""
d=$1
err() { echo "runner-file-error: $1" >&2; exit 3; }
[ -e "$d" ] || err ENOENT
[ -d "$d" ] || err ENOTDIR
cd -- "$d" 2>/dev/null || err EACCES
[ -r . ] || err EACCES
for f in .* *; do
  case $f in .|..) continue;; esac
  [ -e "$f" ] || [ -L "$f" ] || continue
  if [ -d "$f" ] && [ ! -L "$f" ]; then printf '%s/\0' "$f"; else printf '%s\0' "$f"; fi
done
"""
LIST_MAX = 16 * 1024 * 1024  # bytes of names a listing may send


def sandbox_path(r, path: str, *, file: bool = True) -> str:
    """The path as the sandbox sees it. Raises UnsafePath (a RunnerError and ValueError)."""
    from ..untrusted.wspath import UnsafePath, parts

    names = parts(path)
    if file and not names:
        raise UnsafePath(f"{path!r}: name a file in the workspace")
    return posixpath.join(r.placement.workspace, *names)


MAX_GET = 256 * 1024 * 1024  # bytes get_file reads at most (runner serve's routes have their own bound)


def put(r, path: str, data: bytes) -> None:
    from ..policy.protect import ProtectedPath

    target = sandbox_path(r, path)
    limit = r.policy.limits.max_write
    if limit and len(data) > limit:
        raise RunnerError(f"{len(data)} bytes is more than this session's policy writes at once (max_write "
                          f"{limit} bytes)")
    try:
        r.guard.check_writable(r.placement.host_path(target))
    except ProtectedPath as e:
        raise PermissionError(errno.EACCES, str(e), path) from None
    over = r._over_quota(len(data))
    if over:
        raise RunnerError(over)
    if r.placement.remote:
        r.session.on_executor(lambda ex: ex.put_file(target, data))
        return
    from ..untrusted import wsfiles

    st = r.workspace.stat()
    wsfiles.write(r.workspace, path, data, owner=(st.st_uid, st.st_gid))


def get(r, path: str) -> bytes:
    target = sandbox_path(r, path)
    if r.placement.remote:
        return r.session.on_executor(lambda ex: ex.get_file(target, max_size=MAX_GET))
    from ..untrusted import wsfiles

    try:
        f = wsfiles.open_read(r.workspace, path, MAX_GET)
    except wsfiles.TooLarge as e:
        raise RunnerError(str(e)) from None
    except OSError as e:
        raise _named(e, path) from None
    with f:
        return f.read()


def listing(r, path: str = ".") -> list[str]:
    target = sandbox_path(r, path, file=False)
    if not r.placement.remote:
        from ..untrusted import wsfiles

        try:
            return wsfiles.names(r.workspace, path)
        except OSError as e:
            raise _named(e, path) from None
    from executors import ExecRequest
    from executors.base import _file_failure

    def ls(ex) -> list[str]:
        res = ex.exec(ExecRequest(argv=["/bin/sh", "-c", LIST_FILES, "runner-list-files", target],
                                  max_output=LIST_MAX))
        if res.exit_code != 0:
            raise _file_failure(res, path) or OSError(
                f"list_files {path}: {res.stderr.decode(errors='replace').strip() or f'exit {res.exit_code}'}")
        if res.output_limited:
            raise RunnerError(f"list_files {path}: more than {LIST_MAX} bytes of names")
        return sorted(n.decode("utf-8", "surrogateescape") for n in res.stdout.split(b"\0") if n)

    return r.session.on_executor(ls)


def _named(e: OSError, path: str) -> OSError:
    """The same built-in error, naming the workspace path (not a descriptor's or a part's)."""
    return type(e)(e.errno, e.strerror or str(e), path) if e.errno else e
