"""Brokered secrets: a secret with `hosts` never enters the sandbox.

    broker = Broker(policy, workspace)
    env = policy.sandbox_env(workspace=ws, placeholders=broker.placeholders)  # placeholders only
    Egress(..., broker=broker.proxy_entries(), tls_ca=broker.tls_ca(policy, ws))

The sandbox's variable holds a placeholder made for this session (`runner-secret-` and 32 random
hex digits: one token in a header, a URL or base64, unchanged by URL encoding); the real value
stays in the controller and the egress proxy, which puts it in place of the placeholder only in
requests to the secret's hosts (executors/docker/egress_proxy.py).
"""
from __future__ import annotations

import os
import secrets as _random
from pathlib import Path
from typing import Any

PREFIX = "runner-secret-"


class Broker:
    def __init__(self, policy: Any, workspace: str | os.PathLike | None = None,
                 environ: dict[str, str] | None = None) -> None:
        values = policy.resolve_secrets(environ, workspace)
        self.values = {n: v for n, v in values.items() if policy.secrets[n].brokered}
        for n, v in self.values.items():
            if any(c in v for c in "\r\n\0"):
                from .model import SecretUnavailable

                raise SecretUnavailable(f"secret {n} is brokered into request headers and its value holds a line "
                                        "break or NUL: refused (it would split the header)")
        self.placeholders = {n: PREFIX + _random.token_hex(16) for n in self.values}
        self.hosts = {n: list(policy.secrets[n].hosts) for n in self.values}

    def __bool__(self) -> bool:
        return bool(self.values)

    def with_hosts(self, policy: Any) -> None:
        """Take the hosts of a changed policy (a live change: same secrets, same placeholders)."""
        self.hosts = {n: list(policy.secrets[n].hosts) for n in self.values if n in policy.secrets}

    def proxy_entries(self) -> list[dict]:
        """What the egress proxy needs of each brokered secret."""
        return [{"name": n, "placeholder": self.placeholders[n], "value": v, "hosts": self.hosts[n]}
                for n, v in self.values.items()]

    @staticmethod
    def tls_ca(policy: Any, workspace: str | os.PathLike | None = None) -> dict[str, str]:
        """{host: PEM} of network.tls_ca_file (read here, on the controller). A file in the
        workspace is refused: the sandbox could put its own CA there."""
        from ..errors import RunnerError

        out = {}
        for host, path in policy.network.tls_ca_file.items():
            p = Path(os.path.expanduser(path))
            if workspace is not None:
                from ..untrusted.wspath import touches

                if touches(Path(workspace), p):
                    raise RunnerError(f"network.tls_ca_file {host}: {p} lies in the workspace, which the sandbox "
                                      "writes: keep CA files outside it")
            try:
                out[host.rstrip(".").lower()] = p.read_text(encoding="ascii")
            except (OSError, UnicodeDecodeError) as e:
                raise RunnerError(f"network.tls_ca_file {host}: cannot read {p}: {e}") from None
        return out
