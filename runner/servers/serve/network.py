"""A Docker network per tenant for allowlist egress: each session's egress proxy leaves through
its tenant's network, so no two tenants' proxies share a network. Made on first use, labelled
runner.tenant=NAME, removed when this process stops (if no other container uses it)."""
from __future__ import annotations

import sys
import threading

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
            from executors.docker.engine import connect
            from executors.docker import labels as L

            client = connect()
            # The engine's name filter matches substrings ("runner-tenant-X" finds "runner-tenant-X-eu"):
            # only a network of exactly this name is this tenant's.
            if not any(n.get("Name") == name for n in client.api.networks(names=[name])):
                labels = L.make_labels(f"tenant-{tenant}", 10 * 365 * 86400, role="tenant-network",
                                       extra={"runner.tenant": tenant})
                client.api.create_network(name, driver="bridge", internal=False, labels=labels)
            self.made[tenant] = name
            return name

    def close(self) -> None:
        from executors.docker.engine import connect

        with self._lock:
            names, self.made = list(self.made.values()), {}
        if not names:
            return
        try:
            client = connect()
            for name in names:
                try:
                    client.api.remove_network(name)
                except Exception as e:  # in use by another instance's proxy: it removes it later
                    sys.stderr.write(f"runner serve: kept network {name}: {e}\n")
        except Exception:
            pass
