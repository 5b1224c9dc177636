"""Alembic's environment: the connection comes from runner.servers.serve.db.migrate (never from a file)."""
from alembic import context

from runner.servers.serve.db import Base

conn = context.config.attributes["connection"]
context.configure(connection=conn, target_metadata=Base.metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
