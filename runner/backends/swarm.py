"""The swarm backend: docker's sandboxes (same mounts, same hardening where a service can hold
it), each a one-replica service that Docker Swarm places (executors/swarm.py). The workspace
and tool folders are bind mounts, so every node that may take a sandbox must see them at the
same paths (shared storage); `sandbox.placement` keeps sandboxes on such nodes."""
from __future__ import annotations

from contextlib import contextmanager
from typing import Literal, Optional

from pydantic import Field

from executors.swarm import EngineTLS

from ..errors import RunnerError
from .base import Setting
from .docker import DockerBackend, DockerPlacement


class SwarmBackend(DockerBackend):
    type: Literal["swarm"] = "swarm"
    manager: Optional[str] = Field(default=None, description="a manager's engine URL; default the local engine")
    engines: dict[str, str] = Field(default_factory=dict, description="node id, hostname or address -> its engine "
                                    "URL (unix://, tcp:// with tls, ssh:// with known_hosts)")
    tls: Optional[EngineTLS] = None
    known_hosts: Optional[str] = Field(default=None, description="host keys of ssh:// engines (only this file)")
    ssh_key: Optional[str] = Field(default=None, description="private key for ssh:// engines")
    place_timeout: float = Field(default=60.0, gt=0, description="seconds a sandbox waits for room in the swarm")

    def placement(self, setting: Setting) -> "SwarmPlacement":
        return SwarmPlacement(self, setting)

    @classmethod
    def collect_garbage(cls, host: str | None, dry_run: bool) -> list[tuple[str, str, str]]:
        """Orphaned sandbox services and their networks, where the engine at host is a swarm
        manager (nothing elsewhere); its containers are the docker backend's to collect."""
        from executors.docker.engine import connect
        from executors.swarm import reap_orphans

        client = connect(host)
        try:
            return reap_orphans(client, dry_run=dry_run)
        finally:
            client.close()


    @staticmethod
    def nodes(host: str | None) -> list[dict]:
        """The swarm's nodes as `runner nodes` shows them (executors.swarm.nodes), asked of the
        manager at `host`. Raises EngineUnavailable when it does not answer or is no manager."""
        from executors.docker.engine import connect
        from executors.errors import EngineUnavailable
        from executors.swarm import nodes

        client = connect(host)
        if not (client.info().get("Swarm") or {}).get("ControlAvailable"):
            raise EngineUnavailable(f"the engine at {host or 'the local socket'} is no swarm manager: point -H at one")
        return nodes(client)


class SwarmPlacement(DockerPlacement):
    config: SwarmBackend

    def check(self, protected: list[str]) -> None:
        if self.setting.policy.network.mode != "none":
            raise RunnerError("executor swarm runs sandboxes without a network: network.mode allowlist (its egress "
                              "proxy and host firewall) is the docker executor's only")
        super().check(protected)

    @contextmanager
    def frozen(self):
        from executors import ExecutorError

        # hostfreeze pauses sandboxes on this machine's engine only
        raise ExecutorError("refused with executor swarm: runner cannot freeze the session's sandboxes on other "
                            "nodes while a host command runs")
        yield  # pragma: no cover

    def require_engine(self, lifecycle: str) -> None:
        """Swarm sandboxes are per-session: the manager answered when the session started."""

    def remove_sandboxes(self) -> None:
        """Remove the session's services (their tasks' containers go with them) on the manager."""
        from executors.docker.engine import connect

        client = connect(self.config.manager)
        try:
            for svc in client.api.services(filters={"label": self._agents()}):
                client.api.remove_service(svc["ID"])
        finally:
            client.close()

    def direct_channel(self, cfg) -> bool:
        return False  # its sandboxes run on the swarm's nodes: the agent talks over the service's stdio

    def executor(self, cfg):
        from executors.swarm import SwarmConfig, SwarmExecutor

        c = self.config
        return SwarmExecutor(SwarmConfig(
            **{**dict(cfg), "lifecycle": "per-session"}, placement=self.setting.policy.sandbox.placement,
            manager=c.manager, engines=c.engines, tls=c.tls, known_hosts=c.known_hosts, ssh_key=c.ssh_key,
            place_timeout=c.place_timeout))


CONFIG = SwarmBackend  # this module's backend (runner/backends/__init__.py lists the package)
