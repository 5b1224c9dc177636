"""A Docker network per tenant for allowlist egress: each session's egress proxy leaves through
its tenant's network, so no two tenants' proxies share a network. Made on first use, labelled
runner.tenant=NAME, removed when this process stops (if no other container uses it)."""
from __future__ import annotations

import threading

from ...reporting import observe

PREFIX = "runner-tenant-"


class TenantNetworks:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.made: dict[str, str] = {}

    def for_tenant(self, tenant: str, policy_source: str) -> str | None:
        """The tenant's network when the policy is in allowlist mode, else None (nothing made)."""
        from ...policy import load

        if load(policy_source).network.mode != "allowlist":
            return None
        name = PREFIX + tenant
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
