"""The operator's token: what lets a reader at /metrics (and the operator page, /ui) that is not on
loopback in. One mechanism for `runner serve` and `runner mcp --http`.

- The token is $RUNNER_OPERATOR_TOKEN when set; else, for `runner serve`, the file
  DATA/operator-token (made at the server's first start, mode 0600, 32 random bytes in hex:
  `cat DATA/operator-token`). `runner mcp --http` has no data directory: its token is the
  variable's, and without it only loopback reads its /metrics.
- A request is let in when it carries `Authorization: Bearer TOKEN` (compared in constant time),
  or, where the route allows it (`loopback_ok`: /metrics), when it comes from a loopback address
  with no Forwarded / X-Forwarded-For header: a reverse proxy on the same machine makes every
  client look local, and such a proxy says so in those headers.
- Tenants' keys are never operator tokens: a tenant's key is refused here (it is another secret).
"""
from __future__ import annotations

import hmac
import os
import secrets
from pathlib import Path

ENV = "RUNNER_OPERATOR_TOKEN"
TOKEN_FILE = "operator-token"
LOOPBACK_HOSTS = ("127.0.0.1", "::1", "localhost")
_PROXY_HEADERS = (b"forwarded", b"x-forwarded-for", b"x-real-ip")


def token_for(data: Path | None, environ: dict[str, str] | None = None) -> str | None:
    """The operator token: $RUNNER_OPERATOR_TOKEN, else DATA/operator-token (made when missing);
    None without either (no data directory: loopback alone)."""
    env = os.environ if environ is None else environ
    if env.get(ENV):
        return env[ENV].strip() or None
    if data is None:
        return None
    path = Path(data) / TOKEN_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except FileExistsError:
        fd = None
    if fd is not None:
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32) + "\n")
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd) as f:
        return f.read(4096).strip() or None


def from_loopback(scope) -> bool:
    """The request came to us from a loopback address and through no proxy that says so."""
    client = scope.get("client")
    host = client[0] if client else None
    if host is None or not (host in LOOPBACK_HOSTS or host.startswith("127.") or host == "::ffff:127.0.0.1"):
        return False
    return not any(k.lower() in _PROXY_HEADERS for k, _ in scope.get("headers") or [])


def bearer(scope) -> str | None:
    """The Bearer credential of the request's only Authorization header (None: none, or two)."""
    found = [v for k, v in scope.get("headers") or [] if k.lower() == b"authorization"]
    if len(found) != 1:
        return None
    scheme, _, cred = found[0].decode("latin-1").partition(" ")
    return cred.strip() if scheme.lower() == "bearer" else None


class OperatorAuth:
    """allowed(scope): whether a request may read an operator route."""

    def __init__(self, token: str | None) -> None:
        self.token = token

    def allowed(self, scope, loopback_ok: bool = True) -> bool:
        cred = bearer(scope)
        if cred is not None and self.token and hmac.compare_digest(cred.encode(), self.token.encode()):
            return True
        return loopback_ok and cred is None and from_loopback(scope)

    REFUSAL = ("this route is the operator's: send Authorization: Bearer TOKEN with the operator token "
               f"(${ENV}, or the file DATA/{TOKEN_FILE} of runner serve), or read it from loopback")
