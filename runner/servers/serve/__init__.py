"""`runner serve`: many tenants' agents run tools in their own sandboxes over HTTP.

Modules: db (tables, engine, migrations), tenants (keys, grants, quotas), sessions (each
session's Runner and its lifecycle), files (raw bytes in and out of a workspace), app (the
FastAPI routes), mcp (MCP over streamable HTTP at /mcp), main (the uvicorn process).
Its libraries come with the extra `runner[serve]`; nothing else in runner imports this package.
"""
