"""Operator actions outside the server process (`runner tenants remove`)."""
from __future__ import annotations

from . import db as D
from . import tenants as T
from .sessions import Limits, Sessions


def remove_tenant(data: str | None, db: str | None, name: str) -> int:
    """Delete the tenant and close its sessions: the rows go first (every server stops serving
    them at once: their key is gone), then containers labelled with the sessions, and workspaces.
    Its MCP sessions live in the servers' memory: each server's reaper ends them within a second."""
    database = D.open_db(data, db, create=False)
    try:
        sids = T.remove(database, name)
        sessions = Sessions(database, D.data_dir(data), Limits())
        for sid in sids:
            sessions.remove(name, sid)
        sessions.remove_gone_tenants()  # what is left: said on stderr, tried again at each server start
        return len(sids)
    finally:
        database.close()
