"""Volumes of `runner serve`: a tenant's directories that outlive its sessions, mounted where a
session asks at its creation (`{"volumes": {"NAME": "/data"}}`, or "/data:ro").

    <data>/volumes/<tenant>/<name>/              the volume (its contents are the tenant's: hostile)
    <data>/volumes/<tenant>/.sessions/<sid>.json which of them a session mounts, and where

A volume is mounted read-write by one open session at a time (any number read-only, when no
session has it read-write); it belongs to its tenant (another's: 404), a tenant has at most
MAX_VOLUMES of them (429), and a volume past MAX_BYTES cannot be mounted (413) until files go.
"""
from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

from sqlalchemy import select

from ...controller.snapshots import OverQuota, SnapshotError
from ...untrusted.wspath import remove_tree, usage
from . import db as D
from .tenants import NAME_RE

MAX_VOLUMES = int(os.environ.get("RUNNER_SERVE_MAX_VOLUMES", "20"))
MAX_BYTES = int(os.environ.get("RUNNER_SERVE_MAX_VOLUME_BYTES", str(10 << 30)))
_lock = threading.Lock()  # mounts are decided one at a time in this process


class NoVolume(SnapshotError):
    """No such volume for this tenant."""


class InUse(SnapshotError):
    """The volume is mounted by an open session in a way that excludes what was asked."""


class Volumes:
    def __init__(self, sessions) -> None:
        self.sessions = sessions
        self.data = Path(sessions.data)

    def root(self, tenant: str) -> Path:
        return self.data / "volumes" / tenant

    def path(self, tenant: str, name: str) -> Path:
        if not isinstance(name, str) or not NAME_RE.match(name):
            raise NoVolume(f"no volume {str(name)[:60]}: names are 1-40 of a-z, 0-9, _ and -")
        return self.root(tenant) / name

    def create(self, tenant: str, name: str) -> dict:
        from .sessions import own_workspace

        p = self.path(tenant, name)
        with _lock:
            if len(self.names(tenant)) >= MAX_VOLUMES:
                raise OverQuota(f"tenant {tenant} has {MAX_VOLUMES} volumes, its maximum: remove one", 429)
            p.parent.mkdir(parents=True, exist_ok=True, mode=0o711)
            try:
                p.mkdir(mode=0o755)
            except FileExistsError:
                raise InUse(f"volume {name} exists") from None
            own_workspace(p)
        return {"name": name, "created": time.time()}

    def names(self, tenant: str) -> list[str]:
        try:
            return sorted(n for n in os.listdir(self.root(tenant)) if NAME_RE.match(n))
        except FileNotFoundError:
            return []

    def listing(self, tenant: str) -> list[dict]:
        used = self.mounted(tenant)
        out = []
        for n in self.names(tenant):
            u = usage(self.root(tenant) / n, stop_after=MAX_BYTES)
            out.append({"name": n, "size": u.used, "over_quota": u.used > MAX_BYTES,
                        "mounted_by": sorted(used.get(n, {}))})
        return out

    def remove(self, tenant: str, name: str) -> None:
        p = self.path(tenant, name)
        with _lock:
            if not p.is_dir():
                raise NoVolume(f"no volume {name}")
            users = self.mounted(tenant).get(name)
            if users:
                raise InUse(f"volume {name} is mounted by open session(s) {', '.join(sorted(users))}: end them first")
            why = remove_tree(p)
        if why:
            raise SnapshotError(f"could not remove volume {name}: {why}")

    # -- mounts -------------------------------------------------------------------------------------
    def _side(self, tenant: str, sid: str) -> Path:
        return self.root(tenant) / ".sessions" / f"{sid}.json"

    def mounted(self, tenant: str) -> dict[str, dict[str, bool]]:
        """{volume: {open session: read_only}} of the tenant's open sessions."""
        side = self.root(tenant) / ".sessions"
        try:
            files = {f[:-5]: side / f for f in os.listdir(side) if f.endswith(".json")}
        except FileNotFoundError:
            return {}
        with self.sessions.db.session() as s:
            open_ = set(s.scalars(select(D.SessionRow.id).where(D.SessionRow.id.in_(list(files)),
                                                               D.SessionRow.state == "open")))
        out: dict[str, dict[str, bool]] = {}
        for sid, f in files.items():
            if sid not in open_:
                try:
                    f.unlink()  # that session ended: its mounts are free
                except OSError:
                    pass
                continue
            for name, m in json.loads(f.read_text()).items():
                out.setdefault(name, {})[sid] = bool(m["read_only"])
        return out

    @staticmethod
    def parse(asked: dict[str, str]) -> dict[str, dict]:
        """{"NAME": "/data" or "/data:ro"} -> {NAME: {target, read_only}}; ValueError when malformed."""
        from ...policy.model import MountSpec

        out = {}
        for name, spec in asked.items():
            target, _, mode = str(spec).partition(":")
            if mode not in ("", "ro", "rw"):
                raise ValueError(f"volume {name}: give its place as /path or /path:ro")
            MountSpec(source="x", target=target)  # (validates the target)
            out[name] = {"target": target, "read_only": mode == "ro"}
        return out

    def attach(self, tenant: str, sid: str, mounts: dict[str, dict]) -> None:
        """Record the session's mounts, refused when a volume is missing (NoVolume), taken in a way
        that excludes this (InUse), or over its size (OverQuota 413)."""
        with _lock:
            used = self.mounted(tenant)
            for name, m in mounts.items():
                p = self.path(tenant, name)
                if not p.is_dir():
                    raise NoVolume(f"no volume {name}")
                users = used.get(name, {})
                if users and (not m["read_only"] or not all(users.values())):
                    raise InUse(f"volume {name} is mounted by open session(s) {', '.join(sorted(users))}: one "
                                "session mounts a volume read-write, any number read-only when none has it read-write")
                u = usage(p, stop_after=MAX_BYTES)
                if u.used > MAX_BYTES:
                    raise OverQuota(f"volume {name} holds more than {MAX_BYTES} bytes, its maximum: it cannot be "
                                    "mounted until files go", 413)
            side = self._side(tenant, sid)
            side.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            side.write_text(json.dumps(mounts))

    def policy_for(self, tenant: str, sid: str, source: str):
        """The session's policy: `source` as it is, or loaded with the session's volumes mounted."""
        side = self._side(tenant, sid)
        if not side.is_file():
            return source
        from ...policy import load
        from ...policy.model import MountSpec

        pol = load(source)
        extra = [MountSpec(source=str(self.path(tenant, n)), target=m["target"], mode="ro" if m["read_only"] else "rw")
                 for n, m in json.loads(side.read_text()).items()]
        return pol.model_copy(update={"mounts": [*pol.mounts, *extra]})
