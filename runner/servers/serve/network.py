"""A Docker network per tenant for allowlist egress: each session's egress proxy leaves through
its tenant's network, so no two tenants' proxies share a network. Made on first use, labelled
runner.tenant=NAME, removed when this process stops (if no other container uses it). Its name
holds a tag of the server's data directory: instances of one deployment share it, two servers on
one engine whose tenants have the same name do not (they raced to make one name twice, and one
removed the other's)."""
from __future__ import annotations

import hashlib
import threading
from pathlib import Path

from ...reporting import observe

PREFIX = "runner-tenant-"


def network_name(tenant: str, data: str | Path) -> str:
    return f"{PREFIX}{tenant}-{hashlib.sha256(str(Path(data).resolve()).encode()).hexdigest()[:8]}"


class TenantNetworks:
    def __init__(self, data: str | Path) -> None:
        self.data = data
        self._lock = threading.Lock()
        self.made: dict[str, str] = {}

    def for_tenant(self, tenant: str, policy_source: str) -> str | None:
        """The tenant's network when the policy is in allowlist mode, else None (nothing made)."""
        from ...policy import load

        if load(policy_source).network.mode != "allowlist":
            return None
        name = network_name(tenant, self.data)
        with self._lock:
            if tenant in self.made:
                return name
            from ...backends.docker import DockerBackend

            DockerBackend.tenant_network(tenant, name)
            self.made[tenant] = name
            return name

    def close(self) -> None:
        with self._lock:
            names, self.made = list(self.made.values()), {}
        if not names:
            return
        from ...backends.docker import DockerBackend

        try:
            kept = DockerBackend.remove_networks(names)
        except Exception:
            return
        for name, why in kept:  # in use by another instance's proxy: it removes it later
            observe.say(f"kept network {name}: {why}")
