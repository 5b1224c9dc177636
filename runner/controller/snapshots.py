"""Sandboxes that keep their state: pause and resume, snapshots, restores and forks.

    r.pause(); r.resume()                       # the engine's pause (the cgroup freezer)
    sid = r.snapshot("before-refactor")         # the workspace, /tmp, env and cwd, under the data directory
    Runner(workspace=EMPTY_DIR, snapshot=sid)   # a new session from it
    r.fork(3)                                   # three new sessions, each from a snapshot taken now

A snapshot is a directory of the store (`<data>/snapshots/<tenant or ->/<id>/`): `meta.json`,
`workspace.tar` (written here, from the controller's side of the workspace, walked from directory
descriptors with O_NOFOLLOW while the sandbox is frozen: no link is followed, a file swapped for
a link is not read), and `tmp.tar` (the sandbox's /tmp, a tmpfs the controller cannot see: made
by tar in the sandbox, so hostile bytes kept as they came, and only ever unpacked by tar in a
new sandbox). What a snapshot does NOT hold is said in its metadata (`not_captured`): running
processes and memory (see README: process checkpoints), and /tmp under the per-call lifecycle.

Every archive is hostile data: the workspace one is unpacked on the controller by `unpack`,
entry by entry from directory descriptors, never through a link, never outside the target, no
device, no set-id bit, every entry owned by the target's owner.
"""
from __future__ import annotations

import json
import os
import secrets
import stat
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from ..errors import RunnerError
from ..untrusted import wspath

WORKSPACE_TAR = "workspace.tar"
TMP_TAR = "tmp.tar"
META = "meta.json"
ID_PREFIX = "snap-"
CHUNK = 1024 * 1024
SANDBOX_CWD = "/workspace"
# /tmp's entries but the agent's own pipes (runner-agent-*), and not /tmp itself (root's, 1777)
TMP_TAR_CMD = ["/bin/sh", "-c", "cd /tmp && find . -mindepth 1 -maxdepth 1 ! -name 'runner-agent-*' -print0 | "
               "/usr/bin/tar --numeric-owner --null -T - -cf -"]
TMP_UNTAR_CMD = ["/usr/bin/tar", "--numeric-owner", "--no-same-owner", "-C", "/tmp", "-xpf", "-"]
NOT_CAPTURED_PROCESSES = ("running processes and memory: this engine's runtime cannot checkpoint a container "
                          "here (runc: criu fails on this kernel), so a restore starts with no process running")


class SnapshotError(RunnerError):
    """A snapshot that cannot be taken, found or restored; str() says why."""


class NoSnapshot(SnapshotError):
    """No such snapshot (in this store: another tenant's does not exist for it)."""


class UnsafeArchive(SnapshotError):
    """An archive entry that would leave the target, pass through a link, or is not a plain
    file, directory, symlink or hard link."""


# -- pause and resume ---------------------------------------------------------------------------
def container_of(sandbox) -> tuple[str, Any]:
    """(container id, executor) of a docker sandbox; SnapshotError for any other backend."""
    proc = getattr(sandbox, "proc", None)
    cid = getattr(getattr(proc, "container", None), "id", None)
    ex = getattr(sandbox, "executor", None)
    if not cid or not hasattr(ex, "client"):
        raise SnapshotError("pause, resume and snapshots of running sandboxes need the docker backend")
    return cid, ex


def _in_container(sandbox) -> bool:
    try:
        container_of(sandbox)
        return True
    except SnapshotError:
        return False


def _engine_post(sandbox, action: str) -> None:
    """POST /containers/ID/pause|unpause. The engine records a container's new state from the
    runtime's event, after it answered: a pause right after an unpause may be refused as "already
    paused" (and the reverse) for a moment, so such a refusal is tried again (up to ~1 s)."""
    cid, ex = container_of(sandbox)
    wire = ex.wire_engine()
    lag = "already paused" if action == "pause" else "is not paused"
    for attempt in range(100):
        try:
            if wire is not None:
                wire.json("POST", f"/containers/{cid}/{action}", timeout=30)
            else:
                getattr(ex.client.api, action)(cid)
            return
        except Exception as e:
            if lag not in str(e) or attempt == 99:
                raise
            time.sleep(0.01)


def freeze(sandbox) -> None:
    """The engine's pause of the sandbox's container: every process in it stops (cgroup freezer)."""
    _engine_post(sandbox, "pause")


def thaw(sandbox) -> None:
    """The engine's unpause; a container that is gone meanwhile is nothing to resume."""
    try:
        _engine_post(sandbox, "unpause")
    except Exception as e:
        if "No such container" not in str(e):
            raise


# -- the sandbox's /tmp (docker exec of tar in it) ----------------------------------------------
def _exec(sandbox, argv: list[str], stdin: Optional[Path] = None, out: Optional[Path] = None,
          limit: int = 0) -> int:
    """argv in the sandbox's container as its own user; stdin from a file, stdout to a file (at
    most `limit` bytes: SnapshotError past it). Answers the exit code."""
    import socket

    cid, ex = container_of(sandbox)
    api = ex.client.api
    eid = api.exec_create(cid, argv, stdin=stdin is not None, stdout=True, stderr=True)["Id"]
    sock = api.exec_start(eid, socket=True)
    raw = getattr(sock, "_sock", sock)
    try:
        if stdin is not None:
            with open(stdin, "rb") as f:
                while chunk := f.read(CHUNK):
                    raw.sendall(chunk)
            raw.shutdown(socket.SHUT_WR)
        written = 0
        err = b""
        sink = open(out, "wb") if out is not None else None
        try:
            buf = b""
            while True:  # the multiplexed stream: 8-byte headers (stream, size)
                data = raw.recv(CHUNK)
                if not data:
                    break
                buf += data
                while len(buf) >= 8:
                    size = int.from_bytes(buf[4:8], "big")
                    if len(buf) < 8 + size:
                        break
                    kind, payload, buf = buf[0], buf[8:8 + size], buf[8 + size:]
                    if kind == 1 and sink is not None:
                        written += len(payload)
                        if limit and written > limit:
                            raise SnapshotError(f"the sandbox's /tmp is over {limit} bytes as an archive")
                        sink.write(payload)
                    elif kind == 2:
                        err = (err + payload)[-2000:]
        finally:
            if sink is not None:
                sink.close()
    finally:
        raw.close()
    code = api.exec_inspect(eid).get("ExitCode")
    if code not in (0, None):
        raise SnapshotError(f"{' '.join(argv[:1])} in the sandbox failed (exit {code}): "
                            f"{err.decode('utf-8', 'replace').strip()[-300:]}")
    return code or 0


# -- the workspace, packed from the controller's side --------------------------------------------
def pack(root: str | os.PathLike, dest: str | os.PathLike) -> int:
    """Write the tree under root (not root itself) to the tar file dest, byte for byte: regular
    files, directories (empty ones too), symlinks (their target as text, never followed), hard
    links (as links to the first path), modes and times. Sockets, FIFOs and devices are left out.
    Each file is opened from its directory's descriptor with O_NOFOLLOW and read only when it is
    still the regular file the walk saw. Answers the bytes of content written."""
    total = 0
    seen: dict[tuple[int, int], str] = {}
    cached: list = [None, None]  # (rel, DirFd) of the directory whose files are read now
    with tarfile.open(dest, "w", format=tarfile.PAX_FORMAT) as tar:
        try:
            for rel, name, st in wspath.walk(root):
                path = f"{rel}/{name}" if rel else name
                ti = tarfile.TarInfo(path)
                ti.mode = stat.S_IMODE(st.st_mode)
                ti.mtime = int(st.st_mtime)
                ti.uid = ti.gid = 0
                ti.uname = ti.gname = ""
                mode = st.st_mode
                if stat.S_ISDIR(mode):
                    ti.type = tarfile.DIRTYPE
                    tar.addfile(ti)
                    continue
                if stat.S_ISLNK(mode):
                    if cached[0] != rel:
                        _swap_dir(cached, root, rel)
                    try:
                        ti.linkname = os.readlink(name, dir_fd=cached[1].fd)
                    except OSError:
                        continue  # gone meanwhile
                    ti.type = tarfile.SYMTYPE
                    tar.addfile(ti)
                    continue
                if not stat.S_ISREG(mode):
                    continue
                key = (st.st_dev, st.st_ino)
                if st.st_nlink > 1 and key in seen:
                    ti.type = tarfile.LNKTYPE
                    ti.linkname = seen[key]
                    tar.addfile(ti)
                    continue
                if cached[0] != rel:
                    _swap_dir(cached, root, rel)
                try:
                    fd = os.open(name, wspath._FILE_FLAGS, dir_fd=cached[1].fd)
                except OSError:
                    continue  # gone, or swapped for a link meanwhile: not followed
                with os.fdopen(fd, "rb") as f:
                    now = os.fstat(fd)
                    if not stat.S_ISREG(now.st_mode) or (now.st_dev, now.st_ino) != key:
                        continue
                    ti.size = now.st_size
                    tar.addfile(ti, _Exactly(f, now.st_size))
                total += ti.size
                if st.st_nlink > 1:
                    seen[key] = path
        finally:
            if cached[1] is not None:
                cached[1].close()
    return total


def _swap_dir(cached: list, root, rel: str) -> None:
    if cached[1] is not None:
        cached[1].close()
    cached[0], cached[1] = rel, wspath.open_dir(root, rel)


class _Exactly:
    """A file read as exactly `size` bytes (zeros past an end that came early: a file the
    sandbox shrank while it was read; it is frozen for a snapshot, so this is a corner)."""

    def __init__(self, f, size: int) -> None:
        self.f, self.left = f, size

    def read(self, n: int = -1) -> bytes:
        n = self.left if n is None or n < 0 else min(n, self.left)
        data = self.f.read(n)
        if len(data) < n:
            data += b"\0" * (n - len(data))
        self.left -= len(data)
        return data


# -- and unpacked into an empty directory (hostile archive) --------------------------------------
def unpack(archive: str | os.PathLike, target: str | os.PathLike) -> int:
    """Unpack a workspace archive into the directory target (refused unless empty), each entry
    made from its parent's descriptor: no entry may leave target ('..', absolute), pass through
    a link (one it made or not), or be anything but a file, directory, symlink or a hard link to
    a file made before it; modes lose set-id bits; everything is owned by target's owner.
    Raises UnsafeArchive on the first entry that breaks a rule (what was made stays: the caller
    removes target). Answers the number of entries made."""
    target = os.fspath(target)
    tst = os.stat(target)
    if not stat.S_ISDIR(tst.st_mode):
        raise SnapshotError(f"{target} is not a directory")
    if os.listdir(target):
        raise SnapshotError(f"{target} is not empty: a snapshot is restored into an empty directory only")
    uid, gid = tst.st_uid, tst.st_gid
    files: set[str] = set()
    dirs: list[tuple[str, int, int]] = []
    count = 0
    with tarfile.open(archive, "r:") as tar:
        for ti in tar:
            try:
                names = wspath.parts(ti.name)
            except wspath.UnsafePath as e:
                raise UnsafeArchive(f"archive entry {ti.name[:200]!r}: {e}") from None
            if not names:
                continue
            parent, name = "/".join(names[:-1]), names[-1]
            try:
                d = wspath.open_dir(target, parent)
            except (wspath.UnsafePath, OSError) as e:
                raise UnsafeArchive(f"archive entry {ti.name[:200]!r}: its directory: {e}") from None
            with d:
                try:
                    _make(tar, ti, d.fd, name, "/".join(names), uid, gid, files, dirs, target)
                except OSError as e:  # an entry over one already made (a link, say): never through it
                    raise UnsafeArchive(f"archive entry {ti.name[:200]!r}: {e.strerror or e}") from None
            count += 1
    for rel, mode, mtime in reversed(dirs):  # modes and times of directories last (a 0555 one too)
        with wspath.open_dir(target, rel) as d:
            os.fchmod(d.fd, mode)
            os.utime(d.fd, (mtime, mtime))
    return count


def _make(tar, ti, dfd: int, name: str, path: str, uid: int, gid: int, files: set, dirs: list, target: str) -> None:
    mode = ti.mode & 0o1777  # no set-uid, no set-gid
    if ti.isdir():
        try:
            os.mkdir(name, 0o700, dir_fd=dfd)
        except FileExistsError:
            st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            if not stat.S_ISDIR(st.st_mode):
                raise UnsafeArchive(f"archive entry {path[:200]!r}: a directory over an entry already made") from None
        os.chown(name, uid, gid, dir_fd=dfd, follow_symlinks=False)
        dirs.append((path, mode, ti.mtime))
    elif ti.issym():
        if "\x00" in ti.linkname:
            raise UnsafeArchive(f"archive entry {path[:200]!r}: a link target with a NUL byte")
        os.symlink(ti.linkname, name, dir_fd=dfd)  # made, never followed (by this code or anything of runner's)
        os.chown(name, uid, gid, dir_fd=dfd, follow_symlinks=False)
        os.utime(name, (ti.mtime, ti.mtime), dir_fd=dfd, follow_symlinks=False)
    elif ti.islnk():
        try:
            src = wspath.parts(ti.linkname)
        except wspath.UnsafePath as e:
            raise UnsafeArchive(f"archive entry {path[:200]!r}: hard link: {e}") from None
        src_rel = "/".join(src)
        if src_rel not in files:  # only to a regular file this archive made before
            raise UnsafeArchive(f"archive entry {path[:200]!r}: a hard link to {ti.linkname[:200]!r}, which is no "
                                "file this archive made before it")
        with wspath.open_dir(target, "/".join(src[:-1])) as sd:
            os.link(src[-1], name, src_dir_fd=sd.fd, dst_dir_fd=dfd, follow_symlinks=False)
    elif ti.isreg():
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dfd)
        try:
            src = tar.extractfile(ti)
            left = ti.size
            while left > 0:
                data = src.read(min(CHUNK, left))
                if not data:
                    break
                os.write(fd, data) if len(data) < 65536 else _write_all(fd, data)
                left -= len(data)
            os.fchown(fd, uid, gid)
            os.fchmod(fd, mode)
            os.utime(fd, (ti.mtime, ti.mtime))
        finally:
            os.close(fd)
        files.add(path)
    else:
        raise UnsafeArchive(f"archive entry {path[:200]!r}: a {_kind(ti)}, which a workspace snapshot never holds")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _kind(ti) -> str:
    return {tarfile.CHRTYPE: "character device", tarfile.BLKTYPE: "block device",
            tarfile.FIFOTYPE: "FIFO"}.get(ti.type, f"entry of type {ti.type!r}")


# -- the store ----------------------------------------------------------------------------------
@dataclass
class Quota:
    count: int = 0  # snapshots a tenant may keep (0: no limit)
    bytes: int = 0  # and their bytes on disk together (0: no limit)


class OverQuota(SnapshotError):
    """Past the number (status 429) or the bytes (413) of snapshots a tenant may keep."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def data_root(data: str | os.PathLike | None = None) -> Path:
    """The state directory: --data, else $RUNNER_DATA, else ~/.local/share/runner (runner serve's)."""
    d = data or os.environ.get("RUNNER_DATA") or "~/.local/share/runner"
    return Path(d).expanduser().resolve()


class Store:
    """The snapshots of one tenant (or of local Runners: tenant None, the directory `-`)."""

    def __init__(self, data: str | os.PathLike | None = None, tenant: str | None = None,
                 quota: Quota | None = None) -> None:
        self.root = data_root(data) / "snapshots" / (tenant or "-")
        self.tenant = tenant
        self.quota = quota or Quota()

    def path(self, sid: str) -> Path:
        if not (isinstance(sid, str) and sid.startswith(ID_PREFIX) and sid[len(ID_PREFIX):].isalnum()
                and len(sid) <= 64):
            raise NoSnapshot(f"no snapshot {str(sid)[:80]}")
        return self.root / sid

    def meta(self, sid: str) -> dict:
        p = self.path(sid) / META
        try:
            return json.loads(p.read_text())
        except FileNotFoundError:
            raise NoSnapshot(f"no snapshot {sid}") from None

    def list(self) -> list[dict]:
        out = []
        try:
            names = sorted(os.listdir(self.root))
        except FileNotFoundError:
            return []
        now = time.time()
        for n in names:
            try:
                m = self.meta(n)
            except (SnapshotError, ValueError, OSError):
                continue  # a snapshot being written, or left half-written (runner gc removes it)
            out.append({**m, "age": round(now - m.get("created", now), 1)})
        return sorted(out, key=lambda m: m.get("created", 0))

    def remove(self, sid: str) -> None:
        p = self.path(sid)
        if not (p / META).is_file():
            raise NoSnapshot(f"no snapshot {sid}")
        why = wspath.remove_tree(p)
        if why:
            raise SnapshotError(f"could not remove snapshot {sid}: {why}")

    def used(self) -> tuple[int, int]:
        snaps = self.list()
        return len(snaps), sum(int(m.get("size", 0)) for m in snaps)

    def check_quota(self) -> None:
        """OverQuota when one more snapshot would be past the number, or the bytes are used up."""
        n, size = self.used()
        if self.quota.count and n >= self.quota.count:
            raise OverQuota(f"{n} snapshots kept, the tenant's maximum: remove one (DELETE /v1/snapshots/ID)", 429)
        if self.quota.bytes and size >= self.quota.bytes:
            raise OverQuota(f"snapshots take {size} bytes, the tenant's maximum is {self.quota.bytes}: remove one", 413)

    def new_dir(self) -> tuple[str, Path]:
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
        sid = ID_PREFIX + secrets.token_hex(8)
        p = self.root / sid
        p.mkdir(mode=0o700)
        return sid, p


def lookup(snapshot: str | os.PathLike, store: Store | None = None) -> Path:
    """The directory of a snapshot: an id of the store (default: local Runners'), or a path."""
    if isinstance(snapshot, str) and snapshot.startswith(ID_PREFIX) and "/" not in snapshot:
        p = (store or Store()).path(snapshot)
        if not (p / META).is_file():
            raise NoSnapshot(f"no snapshot {snapshot}")
        return p
    p = Path(snapshot)
    if not (p / META).is_file():
        raise NoSnapshot(f"no snapshot at {snapshot}")
    return p


# -- taking and restoring -----------------------------------------------------------------------
def take(runner, store: Store, name: str | None = None) -> dict:
    """A snapshot of a Runner's session now, into the store: its metadata (with `id`). The
    session's sandbox is frozen while its workspace is packed (its /tmp is packed just before,
    by tar in it); a paused session stays paused."""
    session = runner.session
    store.check_quota()
    sid, d = store.new_dir()
    try:
        with runner._lock:
            sandbox = session.live_sandbox()
            not_captured = []
            if sandbox is not None and not _in_container(sandbox):
                sandbox = None  # (the local and ssh backends: no /tmp of the sandbox's own)
            if sandbox is not None:
                limit = 2 * int(runner.policy.limits.tmpfs or 256 << 20) + (16 << 20)  # (headers of tiny files)
                was_paused = session.paused is not None
                if was_paused:
                    session.resume()
                try:
                    _exec(sandbox, TMP_TAR_CMD, out=d / TMP_TAR, limit=limit)
                    freeze(sandbox)
                    try:
                        size = pack(runner.workspace, d / WORKSPACE_TAR)
                    finally:
                        thaw(sandbox)
                finally:
                    if was_paused:
                        session.pause()
            else:
                size = pack(runner.workspace, d / WORKSPACE_TAR)
                not_captured.append("/tmp: no container sandbox was running (per-call lifecycle, none started "
                                    "yet, or a backend without containers)")
            not_captured.append(NOT_CAPTURED_PROCESSES)
            meta = {"id": sid, "name": name, "created": time.time(), "session": runner.session_id,
                    "tenant": runner.policy.tenant, "image": runner.policy.sandbox.image,
                    "cwd": SANDBOX_CWD, "env": sorted(runner.sandbox_env), "processes": False,
                    "not_captured": not_captured, "workspace_bytes": size,
                    "size": sum(f.stat().st_size for f in d.iterdir())}
        (d / (META + ".part")).write_text(json.dumps(meta, indent=1))
        os.replace(d / (META + ".part"), d / META)  # written last: a snapshot without it is unfinished
        return meta
    except BaseException:
        wspath.remove_tree(d)
        raise


def restore_workspace(snapshot_dir: Path, workspace: str | os.PathLike) -> dict:
    """Fill an empty workspace from a snapshot: its metadata."""
    meta = json.loads((snapshot_dir / META).read_text())
    unpack(snapshot_dir / WORKSPACE_TAR, workspace)
    return meta


def restore_tmp(sandbox, snapshot_dir: Path) -> None:
    """Unpack a snapshot's /tmp in a fresh sandbox (by tar in it: the archive is the sandbox's own)."""
    tmp = snapshot_dir / TMP_TAR
    if tmp.is_file() and tmp.stat().st_size:
        _exec(sandbox, TMP_UNTAR_CMD, stdin=tmp)


def fork_workspaces(n: int, like: Path, data: str | os.PathLike | None = None) -> list[Path]:
    """n new empty workspaces for forks, under <data>/forks/ (kept after the forks close), each
    owned as `like` (the workspace forked: its sandboxes run as that owner)."""
    root = data_root(data) / "forks"
    root.mkdir(parents=True, exist_ok=True, mode=0o711)
    st = os.stat(like)
    out = []
    for _ in range(n):
        p = root / ("fork-" + secrets.token_hex(6))
        p.mkdir(mode=0o755)
        if os.geteuid() == 0:
            os.chown(p, st.st_uid, st.st_gid)
        out.append(p)
    return out


UNFINISHED_AGE = 600.0  # seconds after which a snapshot directory without its metadata is a leftover


def sweep(dry_run: bool = False, data: str | os.PathLike | None = None,
          now: float | None = None) -> list[tuple[str, str, str]]:
    """`runner gc`'s step: the snapshot directories a killed controller or server left unfinished
    (no metadata, older than UNFINISHED_AGE), in every store of the data directory. Rows
    (path, "snapshot", why)."""
    now = time.time() if now is None else now
    top = data_root(data) / "snapshots"
    rows = []
    try:
        stores = [p for p in top.iterdir() if p.is_dir() and not p.is_symlink()]
    except OSError:
        return []
    for store in stores:
        try:
            entries = list(store.iterdir())
        except OSError:
            continue
        for d in entries:
            try:
                st = d.lstat()
            except OSError:
                continue
            if not d.name.startswith(ID_PREFIX) or (d / META).is_file() or now - st.st_mtime < UNFINISHED_AGE:
                continue
            why = "an unfinished snapshot (no metadata): its writer was killed"
            if not dry_run:
                failed = wspath.remove_tree(d)
                if failed:
                    why += f"; not removed: {failed}"
            rows.append((str(d), "snapshot", why))
    return rows
