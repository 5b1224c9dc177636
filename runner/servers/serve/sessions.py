"""Sessions: a row in the database (the truth every instance shares), a workspace under the data
directory, and, in the instance that last served it, a Runner (so a sandbox).

Any instance can serve any open session: the first call it gets makes a Runner on the session's
workspace ("adopts" it) and records itself as the owner; an instance that sees another owner,
or the session closed, closes its own Runner. A restart therefore loses no session: its
workspace is kept, its old sandbox is reaped (its owner process is gone) and the next call gets a
fresh one. A session past its idle timeout or maximum lifetime is closed and answers 410.
"""
from __future__ import annotations

import collections
import os
import secrets
import socket
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from sqlalchemy import delete, func, select, update

from ...errors import RunnerError
from ...untrusted.wspath import remove_tree
from . import db as D
from .tenants import Grant


class NotFound(RunnerError):
    """No such session for this tenant (another tenant's session does not exist for it)."""


class Gone(RunnerError):
    """The session existed and was closed; str() says why."""


class Full(RunnerError):
    """The tenant has its maximum of open sessions."""


@dataclass
class Limits:
    idle_timeout: float = 1800.0
    max_lifetime: float = 86400.0
    retention: float = 7 * 86400.0  # an ended session's row is purged this long after it ended


class Live:
    """This instance's Runner of one session."""

    def __init__(self, runner) -> None:
        self.runner = runner
        self.lock = threading.Lock()  # held by the thread running a call
        self.turn = None  # the calls' turn, awaited in the event loop (runner/servers/one_at_a_time.py)
        self.closed = False

    def close(self) -> None:
        self.closed = True
        try:  # (wait: the tenant's containers are counted, and its workspace is removed next)
            self.runner.close(wait=True)
        except Exception as e:
            sys.stderr.write(f"runner serve: closing the Runner of session {self.runner.session_id}: {e}\n")


def instance_id() -> str:
    from executors.posix import process_start_time

    return f"{socket.gethostname()}:{os.getpid()}:{process_start_time(os.getpid()) or ''}"


class Sessions:
    def __init__(self, database: D.Database, data: Path, limits: Limits, tenant_network: Callable | None = None) -> None:
        self.db = database
        self.data = data
        self.limits = limits
        self.me = instance_id()
        self.tenant_network = tenant_network  # tenant name -> its network for allowlist egress, or None
        self._lock = threading.Lock()
        self.live: dict[str, Live] = {}
        # /v1 and /mcp sessions and running /v1/exec count against one maximum per tenant: admitted
        # one at a time in this process (the tenant's row lock serialises instances sharing a database)
        self.admission = threading.Lock()
        self.held: collections.Counter[tuple[str, str]] = collections.Counter()  # (tenant, "mcp" | "exec") here
        self.unremoved: dict[Path, float] = {}  # workspaces a removal left, and when to try again
        self.pending_tmp: dict[str, Path] = {}  # sessions made from a snapshot: its /tmp, for their first sandbox

    # -- places -----------------------------------------------------------------------
    def workspace(self, tenant: str, sid: str) -> Path:
        return self.data / "workspaces" / tenant / sid

    # -- rows -------------------------------------------------------------------------
    def create(self, grant: Grant, policy: str) -> str:
        sid = "s" + secrets.token_hex(12)
        now = time.time()
        with self.admission, self.db.session.begin() as s:
            # Serialise creations of this tenant (a row lock on PostgreSQL; SQLite writes are serial).
            s.execute(select(D.Tenant.name).where(D.Tenant.name == grant.name).with_for_update())
            self.refuse_past_maximum(grant, self._open_rows(s, grant.name))
            ws = self.workspace(grant.name, sid)
            ws.mkdir(parents=True, mode=0o755)
            own_workspace(ws)
            s.add(D.SessionRow(id=sid, tenant=grant.name, policy=policy, state="open", reason="", owner="",
                            created=now, last_used=now))
        return sid

    @staticmethod
    def _open_rows(s, tenant: str) -> int:
        return s.scalar(select(func.count()).select_from(D.SessionRow).where(D.SessionRow.tenant == tenant,
                                                                          D.SessionRow.state == "open"))

    def refuse_past_maximum(self, grant: Grant, rows: int) -> None:
        """Full when the tenant's /v1 sessions (rows), MCP sessions and execs leave no room for one more."""
        mcp, execs, e2b = self.held[grant.name, "mcp"], self.held[grant.name, "exec"], self.held[grant.name, "e2b"]
        if rows + mcp + execs + e2b >= grant.max_sessions:
            raise Full(f"tenant {grant.name} has {rows + mcp + execs + e2b} open sessions ({rows} on /v1, {mcp} over MCP, "
                       f"{execs} running /v1/exec, {e2b} E2B sandboxes), its maximum: end one (DELETE /v1/sessions/ID, or the MCP "
                       "session) or wait for an exec to finish or an idle session to time out")

    def admit_elsewhere(self, grant: Grant, kind: str) -> Callable[[], None]:
        """Admit a session held outside the table (kind "mcp": an MCP session, "exec": a running
        /v1/exec): Full past the maximum, under the same admission as /v1's. Answers what ends it."""
        with self.admission:
            with self.db.session() as s:
                rows = self._open_rows(s, grant.name)
            self.refuse_past_maximum(grant, rows)
            self.held[grant.name, kind] += 1
        done = threading.Event()

        def release() -> None:
            if not done.is_set():
                done.set()
                with self.admission:
                    self.held[grant.name, kind] -= 1
        return release

    def row(self, grant: Grant, sid: str) -> D.SessionRow:
        """The open session of this tenant, or NotFound / Gone."""
        with self.db.session() as s:
            row = s.get(D.SessionRow, sid)
        if row is None or row.tenant != grant.name:
            raise NotFound(f"no session {sid[:60]}")
        if row.state != "open":
            raise Gone(f"session {sid} has ended ({row.reason}); its sandbox and workspace were removed: "
                       "start a new session")
        return row

    def listing(self, grant: Grant) -> list[dict]:
        with self.db.session() as s:
            rows = s.scalars(select(D.SessionRow).where(D.SessionRow.tenant == grant.name, D.SessionRow.state == "open")
                             .order_by(D.SessionRow.created)).all()
        return [{"id": r.id, "policy": r.policy, "created": r.created, "last_used": r.last_used} for r in rows]

    # -- calls ------------------------------------------------------------------------
    def _runner_for(self, grant: Grant, row: D.SessionRow):
        from ...controller.core import Runner

        source = grant.policies.get(row.policy)
        if source is None:
            raise Gone(f"session {row.id}'s policy {row.policy} is no longer granted to {grant.name}")
        ws = self.workspace(grant.name, row.id)
        if not ws.is_dir():
            raise Gone(f"session {row.id}'s workspace is gone: start a new session")
        net = self.tenant_network(grant.name, source) if self.tenant_network else None
        from .volumes import Volumes

        policy = Volumes(self).policy_for(grant.name, row.id, source)  # (its volumes mounted, if any)
        r = Runner(workspace=ws, policy=policy, session=row.id, tenant=grant.name, egress_network=net)
        r.session.restore_tmp = self.pending_tmp.pop(row.id, None)  # (serve/state.py: made from a snapshot)
        from .state import hibernated_dir

        if r.session.restore_tmp is None and (hibernated_dir(self.data, row.id) / "tmp.tar").is_file():
            r.session.restore_tmp = hibernated_dir(self.data, row.id)  # (hibernated: its /tmp, kept on disk)
            r.session.after_restore = lambda: remove_tree(hibernated_dir(self.data, row.id))
        return r

    def use(self, grant: Grant, sid: str) -> Live:
        """This instance's Runner of the session (made here if another instance or a previous
        process held it), the session recorded as used now and owned by this instance."""
        row = self.row(grant, sid)
        with self._lock:
            live = self.live.get(sid)
        if live is None or live.closed:
            live = Live(self._runner_for(grant, row))
            with self._lock:
                other = self.live.get(sid)
                if other is not None and not other.closed:
                    live.close()
                    live = other
                else:
                    self.live[sid] = live
        with self.db.session.begin() as s:
            n = s.execute(update(D.SessionRow).where(D.SessionRow.id == sid, D.SessionRow.state == "open")
                          .values(last_used=time.time(), owner=self.me)).rowcount
        if not n:
            self._drop(sid)
            raise Gone(f"session {sid} has ended; start a new session")
        return live

    def touch(self, sid: str) -> None:
        with self.db.session.begin() as s:
            s.execute(update(D.SessionRow).where(D.SessionRow.id == sid).values(last_used=time.time()))

    # -- ending -----------------------------------------------------------------------
    def close(self, sid: str, reason: str) -> bool:
        """Close an open session (whichever instance holds it): the row first (so every instance
        stops serving it), then its containers, this instance's Runner, and its workspace."""
        with self.db.session.begin() as s:
            row = s.get(D.SessionRow, sid)
            if row is None:
                return False
            n = s.execute(update(D.SessionRow).where(D.SessionRow.id == sid, D.SessionRow.state == "open")
                          .values(state="closed", reason=reason, closed_at=time.time())).rowcount
            tenant = row.tenant
        self.remove(tenant, sid)
        return bool(n)

    def remove(self, tenant: str, sid: str) -> None:
        """Remove what a closed session left: containers (any instance's), Runner, workspace."""
        with self._lock:
            live = self.live.get(sid)
        if live is not None:  # first: a call queued behind the running one, whose turn comes as its
            live.closed = True  # sandbox goes, must find the session ended, not start a new sandbox
        remove_containers({"runner.session": sid})
        self.pending_tmp.pop(sid, None)
        remove_tree(self.data / "hibernated" / sid)
        self._drop(sid)
        self.remove_workspace(self.workspace(tenant, sid))

    def remove_workspace(self, ws: Path) -> bool:
        """Remove a workspace the tenant wrote (any depth, no link followed: wspath.remove_tree);
        what cannot be removed is said on stderr and tried again by the reaper, never raised."""
        why = remove_tree(ws)
        if why is None:
            self.unremoved.pop(ws, None)
            return True
        sys.stderr.write(f"runner serve: {why}; tried again later (every {RETRY_REMOVAL:g}s while a server runs, "
                         "and at each start)\n")
        self.unremoved[ws] = time.time() + RETRY_REMOVAL
        return False

    def _drop(self, sid: str) -> None:
        with self._lock:
            live = self.live.pop(sid, None)
        if live is not None:
            live.close()

    def reap_once(self, now: float | None = None) -> list[str]:
        """Close sessions past their idle timeout or lifetime; let go of Runners whose session is
        closed, gone or now served by another instance. Answers the ids closed here."""
        now = time.time() if now is None else now
        lim = self.limits
        with self.db.session() as s:
            due = s.execute(select(D.SessionRow.id, D.SessionRow.last_used, D.SessionRow.created).where(
                D.SessionRow.state == "open",
                (D.SessionRow.last_used < now - lim.idle_timeout) | (D.SessionRow.created < now - lim.max_lifetime))).all()
        closed = []
        for sid, _last_used, created in due:
            old = created < now - lim.max_lifetime
            busy = self.live.get(sid)
            if not old and busy is not None and busy.lock.locked():
                continue  # a call is running: it is not idle (the lifetime ends it all the same)
            why = "maximum lifetime reached" if old else "idle timeout"
            if self.close(sid, why):
                closed.append(sid)
        for ws, due in list(self.unremoved.items()):
            if due <= now:
                self.remove_workspace(ws)
        with self._lock:
            mine = list(self.live)
        if mine:
            with self.db.session() as s:
                rows = {r.id: r for r in s.scalars(select(D.SessionRow).where(D.SessionRow.id.in_(mine)))}
            for sid in mine:
                r = rows.get(sid)
                if r is None or r.state != "open":
                    self.remove(r.tenant if r else "", sid) if r else self._drop(sid)
                elif r.owner and r.owner != self.me:
                    live = self.live.get(sid)
                    if live is not None and not live.lock.locked():
                        self._drop(sid)
        return closed

    def purge_ended(self, now: float | None = None) -> int:
        """Delete the rows of sessions that ended more than limits.retention seconds ago (their id
        then answers 404, not 410); a row whose workspace is still on disk stays, so that what is
        left of it is still found and removed. Answers how many went."""
        now = time.time() if now is None else now
        with self.db.session() as s:
            old = s.execute(select(D.SessionRow.id, D.SessionRow.tenant).where(
                D.SessionRow.state != "open", D.SessionRow.closed_at < now - self.limits.retention)).all()
        gone = [sid for sid, tenant in old if not self.workspace(tenant, sid).exists()]
        for i in range(0, len(gone), 500):
            with self.db.session.begin() as s:
                s.execute(delete(D.SessionRow).where(D.SessionRow.id.in_(gone[i:i + 500]), D.SessionRow.state != "open"))
        return len(gone)

    def adopt_at_start(self) -> list[str]:
        """After a restart: remove the containers of this database's sessions whose owner process
        is gone (their agents' channels died with it), and the workspaces of closed sessions.
        Open sessions stay open: the next call gets a fresh sandbox on the same workspace."""
        from ...backends.docker import DockerBackend

        orphan_reason = DockerBackend.orphan_reason
        with self.db.session() as s:
            rows = {r.id: (r.tenant, r.state) for r in s.scalars(select(D.SessionRow))}
        removed = []
        for c in containers({"runner.session": None}):
            labels = c.get("Labels") or {}
            sid = labels.get("runner.session")
            if sid in rows and (rows[sid][1] != "open" or orphan_reason(labels) is not None):
                if remove_container(c["Id"]):
                    removed.append(c["Id"])
        for c in containers({"runner.role": "serve-exec"}):  # a dead server's execs (no session row)
            if orphan_reason(c.get("Labels") or {}) is not None and remove_container(c["Id"]):
                removed.append(c["Id"])
        for c in containers({"runner.tenant": None}):  # a dead server's MCP sandboxes (no session row either)
            labels = c.get("Labels") or {}
            if labels.get("runner.session") not in rows and orphan_reason(labels) is not None \
                    and remove_container(c["Id"]):
                removed.append(c["Id"])
        remove_networks({sid for sid in rows})
        from ...controller.piddirs import sweep_local  # what dead controllers left here: the previous run's among them

        sweep_local()
        for sid, (tenant, state) in rows.items():
            if state != "open":
                self.remove_workspace(self.workspace(tenant, sid))
                remove_tree(self.data / "hibernated" / sid)  # (a hibernated session that ended meanwhile)
        self.remove_gone_tenants()
        self.remove_dead_mcp_workspaces()
        return removed

    def remove_dead_mcp_workspaces(self) -> None:
        """MCP sessions live in their server's memory: the workspaces of a server that is gone
        (killed, or its machine restarted) are named for its process, and go here."""
        from ...controller import piddirs

        top = self.data / "mcp"
        try:
            tenants = [p for p in top.iterdir() if p.is_dir() and not p.is_symlink()]
        except OSError:
            return
        for d in tenants:
            for path, _why in piddirs.sweep(str(d), MCP_PREFIX):
                if os.path.lexists(path):
                    self.remove_workspace(Path(path))  # said, and tried again

    def remove_gone_tenants(self) -> None:
        """The workspaces of tenants that no longer exist (`runner tenants remove` could not remove
        all of them: their session rows are gone with the tenant, so nothing else names them)."""
        from .tenants import present

        top = self.data / "workspaces"
        try:
            names = {p.name for p in top.iterdir()}
        except OSError:
            return
        for name in names - present(self.db, names):
            self.remove_workspace(top / name)
        for kept in ("snapshots", "volumes"):  # and their snapshots and volumes (`-`: local Runners', no tenant's)
            top = self.data / kept
            try:
                names = {p.name for p in top.iterdir()} - {"-"}
            except OSError:
                continue
            for name in names - present(self.db, names):
                self.remove_workspace(top / name)

    def close_all_live(self) -> None:
        """Shutdown: this instance's Runners and execs go (their sessions stay open, for the next start)."""
        remove_containers({"runner.role": "serve-exec", "runner.owner.pid": str(os.getpid())})
        with self._lock:
            lives, self.live = list(self.live.values()), {}
        threads = [threading.Thread(target=lv.close) for lv in lives]
        for t in threads:
            t.start()
        for t in threads:
            t.join()


MCP_PREFIX = "m"  # an MCP session's workspace: DATA/mcp/TENANT/m<pid>.<start>-<random>/ws (runner/controller/piddirs.py)
RETRY_REMOVAL = 60.0  # seconds between tries at a workspace that could not be removed
SANDBOX_UID = 1000  # a root server's sessions' workspaces belong to this user, so their sandboxes run as it


def own_workspace(ws: Path) -> None:
    """Sandboxes run as the workspace's owner: never root, even when the server is."""
    if os.geteuid() == 0:
        os.chown(ws, SANDBOX_UID, SANDBOX_UID)


# -- containers by label (the docker backend's: runner/backends/docker.py) ----------------------
def containers(labels: dict[str, str | None]) -> list[dict]:
    from ...backends.docker import DockerBackend

    try:
        return DockerBackend.sandboxes(labels)
    except Exception as e:
        sys.stderr.write(f"runner serve: could not list containers: {e}\n")
        return []


def remove_container(cid: str) -> bool:
    from ...backends.docker import DockerBackend

    try:
        DockerBackend.remove_sandbox(cid)
        return True
    except Exception as e:
        if "No such container" not in str(e) and "is already in progress" not in str(e):
            sys.stderr.write(f"runner serve: could not remove container {cid[:12]}: {e}\n")
        return False


def remove_containers(labels: dict[str, str | None]) -> int:
    return sum(remove_container(c["Id"]) for c in containers(labels))


def remove_networks(sids: set[str]) -> None:
    """The egress (allowlist mode: proxy, networks, firewall rules) of these sessions whose owner
    process is gone, as `runner gc` does, and nothing of any other session."""
    if not sids:
        return
    from ...backends.docker import DockerBackend

    try:
        DockerBackend.reap_egress(sids)
    except Exception as e:
        sys.stderr.write(f"runner serve: could not reap the egress of a previous run: {e}\n")
