"""A live session's network policy, changed without a restart (Runner.update_policy, and
`PATCH /v1/sessions/{id}/policy` in runner serve).

What may change: network.allow, network.tls_ca_file, and the hosts of a secret that is already
brokered (it keeps at least one: its value never enters the sandbox, so it cannot become a plain
secret now). The mode, the secrets themselves and everything else stay as the session started.
The new policy is checked like any other (a brokered host must be in the allowlist), handed to
the egress proxy, which decides its next connections by it, and audited (tool `policy`).
"""
from __future__ import annotations

import dataclasses
from typing import Any

from ..errors import RunnerError

CHANGEABLE = {"network": ("allow", "tls_ca_file"), "secrets": ("hosts",)}


def overrides(policy: Any, changes: Any) -> dict[str, Any]:
    """The dotted overrides `changes` asks for; raises RunnerError for anything else."""
    if not isinstance(changes, dict) or not changes:
        raise RunnerError("a policy change is a mapping: {network: {allow: [...]}, secrets: {NAME: {hosts: [...]}}}")
    out: dict[str, Any] = {}
    for section, body in changes.items():
        if section not in CHANGEABLE or not isinstance(body, dict):
            raise RunnerError(f"{section}: cannot change on a live session (only network.allow, network.tls_ca_file "
                              "and the hosts of brokered secrets)")
        if section == "network":
            for key, value in body.items():
                if key not in CHANGEABLE["network"]:
                    raise RunnerError(f"network.{key}: cannot change on a live session")
                out[f"network.{key}"] = value
            continue
        for name, spec in body.items():
            s = policy.secrets.get(name)
            if s is None or not s.brokered:
                raise RunnerError(f"secrets.{name}: only a secret brokered since the session started can change, "
                                  "and only its hosts")
            if not isinstance(spec, dict) or set(spec) - {"hosts"}:
                raise RunnerError(f"secrets.{name}: only hosts can change on a live session")
            if "hosts" in spec:
                if not spec["hosts"]:
                    raise RunnerError(f"secrets.{name}: a brokered secret keeps at least one host (its value never "
                                      "enters the sandbox)")
                out[f"secrets.{name}.hosts"] = spec["hosts"]
    return out


def within_grant(started: Any, changes: Any) -> str | None:
    """Why `changes` goes past the policy the session started with, or None. A part of another
    shape than a change has (a list where a mapping goes, a string where a list goes) is past
    the grant too: nothing a tenant sends makes this fail, and nothing is read in a way the
    policy would read otherwise."""
    from executors.allowlist import canonical

    if not isinstance(changes, dict):
        return None  # the change itself says what is wrong with it (422)
    net = changes.get("network") or {}
    if not isinstance(net, dict):
        return "network: a mapping ({allow: [...]}) is all a tenant may change there"
    if "tls_ca_file" in net:
        return "network.tls_ca_file names the operator's files: not a tenant's to change"
    granted = set(started.network.allow)
    allow = net.get("allow") or []
    if not isinstance(allow, list):
        return "network.allow: a list of the granted policy's entries"
    for entry in allow:
        try:
            spelled = canonical(entry)
        except (ValueError, TypeError):
            continue  # refused as invalid (422)
        if spelled not in granted:
            return f"network.allow {spelled!r} is not in the granted policy's allowlist"
    secrets = changes.get("secrets") or {}
    if not isinstance(secrets, dict):
        return "secrets: a mapping ({NAME: {hosts: [...]}}) is all a tenant may change there"
    for name, spec in secrets.items():
        s = started.secrets.get(name)
        if s is None or not isinstance(spec, dict):
            continue  # refused by the change itself
        hosts = spec.get("hosts") or []
        if not isinstance(hosts, list):
            return f"secrets.{name}.hosts: a list of the hosts the granted policy gives it"
        for h in hosts:
            if not isinstance(h, str) or h.rstrip(".").lower() not in s.hosts:
                return f"secrets.{name}.hosts {h!r} is not among the hosts the granted policy gives it"
    return None


def apply(runner: Any, changes: dict) -> dict:
    old = runner.policy
    if old.network.mode != "allowlist":
        raise RunnerError("this session's network mode is none: there is no egress to change (start a session "
                          "with network.mode allowlist)")
    new = old.effective(overrides=overrides(old, changes), workspace=runner.workspace)
    with runner._lock:
        if getattr(runner, "started_policy", None) is None:
            runner.started_policy = old  # what runner serve's grant is measured against
        runner.session.start()  # the proxy exists before it is told anything
        runner.placement.update_network(new)
        setting = dataclasses.replace(runner.session.setting, policy=new)
        runner.session.setting = setting
        runner.placement.setting = setting
        runner.policy = new
    summary = {"network": {"allow": list(new.network.allow), "tls_ca_file": dict(new.network.tls_ca_file)},
               "secrets": {n: {"hosts": list(s.hosts)} for n, s in new.secrets.items() if s.brokered}}
    if runner.audit is not None:
        runner.audit.record(call_id="policy", tool="policy", status="ok", session=runner.session_id,
                            tenant=new.tenant, args={"change": changes, "now": summary})
    return summary
