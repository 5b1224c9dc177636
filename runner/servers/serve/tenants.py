"""Tenants: their API keys (only a hash is stored), what the operator granted them, and quotas.

A key is `rk_<id>_<secret>`: the id finds the tenant's row, then the sha256 of the whole key is
compared with hmac.compare_digest. Keys are looked up on every request (no cache), so a new key
replaces the old one at once, in every running server, and so does `runner tenants update`
(quotas and grants: a session whose policy is no longer granted ends at its next call).
What is granted is proved when granted: each policy loads, each image is on the engine.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import delete, select, update

from ...errors import UsageError
from . import db as D

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,39}$")
DEFAULT_POLICY = "multi-tenant"
DEFAULT_MAX_SESSIONS = 10
DEFAULT_CALLS_PER_MINUTE = 600


@dataclass(frozen=True)
class Grant:
    """A tenant as the service sees it on a request."""

    name: str
    policies: dict[str, str]  # the name a tenant uses -> the operator's preset name or policy file
    images: list[str]
    max_sessions: int
    calls_per_minute: int

    @property
    def default_policy(self) -> str:
        return next(iter(self.policies))


def check_name(name: str) -> str:
    if not NAME_RE.match(name or ""):
        raise UsageError(f"bad tenant name {name!r}: use 1-40 of a-z, 0-9, '-' and '_', starting with a letter "
                         "or digit (it names containers' labels and networks)")
    return name


def _hash(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()


def _new_key() -> tuple[str, str, str]:
    key_id = secrets.token_hex(8)
    key = f"rk_{key_id}_{secrets.token_urlsafe(32)}"
    return key, key_id, _hash(key)


def grant_policies(policies: list[str]) -> dict[str, str]:
    """{name: source} of the operator's --policy values, each loaded once to prove it valid. A
    preset is named by itself, a file by its stem (tenants never see the operator's paths)."""
    from ...policy import load

    out: dict[str, str] = {}
    for p in policies or [DEFAULT_POLICY]:
        path = Path(p).expanduser()
        is_file = path.suffix in (".yaml", ".yml") or "/" in p
        source = str(path.resolve()) if is_file else p
        load(source)  # raises PolicyError naming the problem
        name = path.stem if is_file else p
        if name in out:
            raise UsageError(f"two granted policies are both named {name!r}: rename one file")
        out[name] = source
    return out


def grant_images(images: list[str]) -> list[str]:
    """The operator's --image values, each proved present on the engine (runner never pulls):
    UsageError naming the first that is not, or saying the engine could not be asked."""
    from executors.errors import ExecutorError

    from ...backends.docker import DockerBackend
    from .app import _qualify  # (the one qualification of a name, as /v1/exec compares them)

    for image in images:
        try:
            DockerBackend.require_image(_qualify(image))
        except ExecutorError as e:
            raise UsageError(f"cannot grant image {image}: {e}") from None
    return list(images)


def _limits(max_sessions: int | None, calls_per_minute: int | None) -> None:
    for n, v in (("--max-sessions", max_sessions), ("--calls-per-minute", calls_per_minute)):
        if v is not None and v < 1:
            raise UsageError(f"{n} must be at least 1")


def _grant(row: D.Tenant) -> Grant:
    return Grant(name=row.name, policies=json.loads(row.policies), images=json.loads(row.images),
                 max_sessions=row.max_sessions, calls_per_minute=row.calls_per_minute)


def add(database: D.Database, name: str, policies: list[str], max_sessions: int | None,
        calls_per_minute: int | None, images: list[str]) -> str:
    """Make a tenant; answers its key (shown once, never stored)."""
    check_name(name)
    _limits(max_sessions, calls_per_minute)
    granted = grant_policies(policies)
    images = grant_images(images)
    key, key_id, key_hash = _new_key()
    with database.session.begin() as s:
        if s.get(D.Tenant, name) is not None:
            raise UsageError(f"tenant {name} exists: `runner tenants key {name}` gives it a new key")
        s.add(D.Tenant(name=name, key_id=key_id, key_hash=key_hash, policies=json.dumps(granted),
                       images=json.dumps(list(images)), max_sessions=max_sessions or DEFAULT_MAX_SESSIONS,
                       calls_per_minute=calls_per_minute or DEFAULT_CALLS_PER_MINUTE, created=time.time()))
    return key


def change(database: D.Database, name: str, max_sessions: int | None = None, calls_per_minute: int | None = None,
           images: list[str] | None = None, policies: list[str] | None = None) -> dict:
    """Change a tenant in place (its key and sessions stay): what is given replaces what it had
    (images and policies as whole lists, the first policy its default). Every running server
    reads it at the tenant's next request. Answers the tenant as `listing` shows it."""
    _limits(max_sessions, calls_per_minute)
    values: dict = {}
    if max_sessions is not None:
        values["max_sessions"] = max_sessions
    if calls_per_minute is not None:
        values["calls_per_minute"] = calls_per_minute
    if policies is not None:
        values["policies"] = json.dumps(grant_policies(policies))
    if images is not None:
        values["images"] = json.dumps(grant_images(images))
    if not values:
        raise UsageError("nothing to change: give --max-sessions, --calls-per-minute, --image or --policy")
    with database.session.begin() as s:
        n = s.execute(update(D.Tenant).where(D.Tenant.name == name).values(**values)).rowcount
    if not n:
        raise UsageError(f"no tenant {name}: `runner tenants list` shows them")
    return next(t for t in listing(database) if t["name"] == name)


def rotate(database: D.Database, name: str) -> str:
    """A new key for the tenant; the old one stops working with this commit."""
    key, key_id, key_hash = _new_key()
    with database.session.begin() as s:
        n = s.execute(update(D.Tenant).where(D.Tenant.name == name).values(key_id=key_id, key_hash=key_hash)).rowcount
    if not n:
        raise UsageError(f"no tenant {name}: `runner tenants list` shows them")
    return key


def listing(database: D.Database) -> list[dict]:
    with database.session() as s:
        rows = s.scalars(select(D.Tenant).order_by(D.Tenant.name)).all()
        out = []
        for r in rows:
            open_ = s.query(D.SessionRow).filter(D.SessionRow.tenant == r.name, D.SessionRow.state == "open").count()
            g = _grant(r)
            out.append({"name": r.name, "policies": list(g.policies), "images": g.images,
                        "max_sessions": r.max_sessions, "calls_per_minute": r.calls_per_minute, "open_sessions": open_})
        return out


def remove(database: D.Database, name: str) -> list[str]:
    """Delete the tenant; answers the ids of its sessions that were open (the caller closes them)."""
    with database.session.begin() as s:
        row = s.get(D.Tenant, name)
        if row is None:
            raise UsageError(f"no tenant {name}: `runner tenants list` shows them")
        ids = list(s.scalars(select(D.SessionRow.id).where(D.SessionRow.tenant == name, D.SessionRow.state == "open")))
        s.execute(delete(D.Usage).where(D.Usage.tenant == name))
        s.execute(delete(D.SessionRow).where(D.SessionRow.tenant == name))
        s.delete(row)
    return ids


def present(database: D.Database, names: set[str]) -> set[str]:
    """Those of the names that are tenants still."""
    with database.session() as s:
        return set(s.scalars(select(D.Tenant.name).where(D.Tenant.name.in_(names))))


def authenticate(database: D.Database, key: str | None) -> Grant | None:
    """The tenant whose key this is, or None. Every request reads the row: no cache."""
    if not key or not key.startswith("rk_") or len(key) > 200:
        return None
    key_id = key[3:].split("_", 1)[0]
    with database.session() as s:
        row = s.scalars(select(D.Tenant).where(D.Tenant.key_id == key_id)).first()
        if row is None:
            hmac.compare_digest(_hash(key), "0" * 64)  # the same work either way
            return None
        if not hmac.compare_digest(_hash(key), row.key_hash):
            return None
        return _grant(row)


def take_call(database: D.Database, grant: Grant, now: float | None = None) -> float | None:
    """Count one call against the tenant's calls per minute (shared by every instance through the
    database). None when allowed, else the seconds until the next window (Retry-After)."""
    now = time.time() if now is None else now
    window = int(now // 60)
    from sqlalchemy.exc import IntegrityError

    retry = max(1.0, (window + 1) * 60 - now)
    counted = update(D.Usage).where(D.Usage.tenant == grant.name, D.Usage.window == window,
                                    D.Usage.count < grant.calls_per_minute).values(count=D.Usage.count + 1)
    with database.engine.begin() as conn:  # (Core: the hot path of every call, the minute's row there)
        if conn.execute(counted).rowcount:
            return None
    with database.session() as s:
        if s.execute(counted).rowcount:  # (the minute's row made by another request since)
            s.commit()
            return None
        if s.get(D.Usage, (grant.name, window)) is not None:
            s.rollback()
            return retry
        s.execute(delete(D.Usage).where(D.Usage.tenant == grant.name, D.Usage.window < window))
        s.add(D.Usage(tenant=grant.name, window=window, count=1))
        try:
            s.commit()
            return None
        except IntegrityError:  # another request made the row first: count this call in it
            s.rollback()
    return take_call(database, grant, now)
