"""Request headers of the HTTP servers (`runner serve`, `runner mcp --http`), read one way.

A header folded into a dict gives its last copy; starlette's `headers.get`, the MCP SDK and h11
give the first. A request carrying two copies of a header that says who it is, where it goes or
how long it is would then be one tenant's to one reader and another's to the next (issue 43: a
tenant ran in another tenant's MCP session with two Mcp-Session-Id headers). So: every header the
servers read is in GUARDED and read with `header()` alone, which answers its only copy; and
`refuse_duplicates` (the outermost layer of both servers) answers 400 to a request carrying a
GUARDED header twice, before anything reads it.
"""
from __future__ import annotations

from ..errors import RunnerError

GUARDED = frozenset({
    "authorization",  # the tenant
    "mcp-session-id",  # the MCP session, so whose sandbox
    "mcp-protocol-version", "mcp-method", "mcp-name",  # the SDK's routing of an MCP request
    "last-event-id",  # the stream an MCP client resumes
    "content-length",  # where a body ends (the body limit reads it)
    "host", "origin",  # runner mcp --http's DNS-rebinding check
    "x-api-key", "e2b-sandbox-id", "x-access-token",  # E2B's API (runner/servers/e2b/): the tenant, the sandbox, its token
})


class DuplicateHeader(RunnerError):
    """A GUARDED header came more than once (refuse_duplicates answers such a request 400 first)."""


def header(scope, name: str) -> str | None:
    """The value of request header `name` (lower case, one of GUARDED), or None without one."""
    if name not in GUARDED:
        raise ValueError(f"header {name!r} is read by the server, so it must be in GUARDED")
    key = name.encode("latin-1")
    found = [v for k, v in scope.get("headers") or [] if k.lower() == key]
    if len(found) > 1:
        raise DuplicateHeader(f"the {name} header appears {len(found)} times")
    return found[0].decode("latin-1") if found else None


def duplicated(scope) -> str | None:
    """The name of a GUARDED header the request carries more than once, or None."""
    seen: set[bytes] = set()
    for k, _ in scope.get("headers") or []:
        k = k.lower()
        if k in seen and k.decode("latin-1") in GUARDED:
            return k.decode("latin-1")
        seen.add(k)
    return None


def framed_twice(scope) -> bool:
    """Whether the request says where its body ends two ways: Content-Length and Transfer-Encoding.
    h11 frames it by the chunks, the body limit (and any front end that frames by length) by the
    length: what one takes for the body, the other takes for the next request (smuggling)."""
    names = {k.lower() for k, _ in scope.get("headers") or []}
    return b"content-length" in names and b"transfer-encoding" in names


def refuse_duplicates(app):
    """`app` behind a 400 for a request that carries a GUARDED header more than once, or frames its
    body two ways (that one's connection closed too: where its body ends is not known)."""

    async def guarded(scope, receive, send):
        if scope["type"] == "http":
            from starlette.responses import JSONResponse

            name = duplicated(scope)
            if name is not None:
                return await JSONResponse({"detail": f"the {name} header appears more than once: send it once"},
                                          status_code=400)(scope, receive, send)
            if framed_twice(scope):
                return await JSONResponse({"detail": "Content-Length and Transfer-Encoding together: send one"},
                                          status_code=400, headers={"Connection": "close"})(scope, receive, send)
        return await app(scope, receive, send)
    return guarded
