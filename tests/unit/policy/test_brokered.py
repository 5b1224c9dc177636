"""Brokered secrets in the policy: `hosts` makes a secret's variable a placeholder, checked
against the allowlist; `runner policy check` says which secrets enter the sandbox; a live change
may touch only the allowlist and brokered hosts, and runner serve's only within the grant."""
from __future__ import annotations

import subprocess
import sys

import pytest

from runner.controller.live_policy import overrides, within_grant
from runner.errors import RunnerError
from runner.policy import PolicyError, load
from runner.policy.broker import PREFIX, Broker
from runner.reporting.audit import AuditLog
from runner.reporting.redact import Redactor

BASE = {"network.mode": "allowlist", "network.allow": ["api.github.com", "pypi.org:443"]}


def pol(**secrets):
    return load("default").effective(overrides={**BASE, "secrets": secrets})


def test_a_secret_with_hosts_puts_a_placeholder_in_the_sandbox_and_keeps_its_value_out():
    p = pol(GH={"from_env": "GH_REAL", "hosts": ["API.GitHub.com."]}, NPM={"from_env": "NPM_REAL"})
    env = {"GH_REAL": "ghp_real_value", "NPM_REAL": "npm_real"}
    assert p.secrets["GH"].hosts == ["api.github.com"]
    b = Broker(p, environ=env)
    ph = b.placeholders["GH"]
    assert ph.startswith(PREFIX) and len(ph) == len(PREFIX) + 32 and set(b.placeholders) == {"GH"}
    assert Broker(p, environ=env).placeholders["GH"] != ph  # one per session
    sandbox = p.sandbox_env(environ=env, placeholders=b.placeholders)
    assert sandbox["GH"] == ph and sandbox["NPM"] == "npm_real" and "ghp_real_value" not in sandbox.values()
    assert b.proxy_entries() == [{"name": "GH", "placeholder": ph, "value": "ghp_real_value",
                                  "hosts": ["api.github.com"]}]
    with pytest.raises(Exception, match="brokered"):  # never the value for want of a placeholder
        p.sandbox_env(environ=env)


def test_a_brokered_value_that_would_split_a_header_is_refused():
    p = pol(GH={"from_env": "GH_REAL", "hosts": ["api.github.com"]})
    with pytest.raises(Exception, match="line break or NUL"):
        Broker(p, environ={"GH_REAL": "tok\r\nX-Evil: 1"})


@pytest.mark.parametrize("hosts,msg", [
    (["evil.test"], "not in network.allow"), (["*.github.com"], "not a host name"),
    (["10.0.0.1"], "not a host name"), (["api.github.com:443"], "not a host name"),
])
def test_brokered_hosts_are_names_on_the_allowlist(hosts, msg):
    with pytest.raises(PolicyError, match=msg):
        pol(GH={"from_env": "X", "hosts": hosts})


def test_brokering_needs_the_egress_proxy():
    with pytest.raises(PolicyError, match="network.mode allowlist"):
        load("default").effective(overrides={"secrets": {"GH": {"from_env": "X", "hosts": ["a.test"]}}})
    with pytest.raises(PolicyError, match="sandbox.executor docker"):
        load("default").effective(overrides={**BASE, "sandbox.executor": "local",
                                             "secrets": {"GH": {"from_env": "X", "hosts": ["api.github.com"]}}})


def test_policy_check_says_which_secrets_enter_the_sandbox(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("extends: default\nnetwork: {mode: allowlist, allow: [api.github.com]}\nsecrets:\n"
                 "  GH: {from_env: GH, hosts: [api.github.com]}\n  NPM: {from_env: NPM}\n")
    res = subprocess.run([sys.executable, "-m", "runner", "policy", "check", str(f)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].endswith(": ok")
    assert any("secret GH: brokered" in x and "only to api.github.com" in x for x in lines)
    assert any("secret NPM: enters the sandbox as $NPM" in x for x in lines)


def test_a_live_change_touches_only_the_allowlist_and_brokered_hosts():
    p = pol(GH={"from_env": "X", "hosts": ["api.github.com"]}, NPM={"from_env": "Y"})
    assert overrides(p, {"network": {"allow": ["pypi.org:443"]}, "secrets": {"GH": {"hosts": ["pypi.org"]}}}) == {
        "network.allow": ["pypi.org:443"], "secrets.GH.hosts": ["pypi.org"]}
    for bad, msg in [({"network": {"mode": "none"}}, "cannot change"), ({"limits": {"memory": "1g"}}, "cannot change"),
                     ({"secrets": {"NPM": {"hosts": ["pypi.org"]}}}, "only a secret brokered"),
                     ({"secrets": {"GH": {"hosts": []}}}, "at least one host"),
                     ({"secrets": {"GH": {"from_env": "Z"}}}, "only hosts"), ({}, "mapping")]:
        with pytest.raises(RunnerError, match=msg):
            overrides(p, bad)
    # the result is checked like any policy: a brokered host must stay on the allowlist
    with pytest.raises(PolicyError, match="not in network.allow"):
        p.effective(overrides=overrides(p, {"network": {"allow": ["pypi.org:443"]}}))


def test_serve_keeps_a_change_within_the_grant():
    p = pol(GH={"from_env": "X", "hosts": ["api.github.com"]})
    assert within_grant(p, {"network": {"allow": ["pypi.org:443"]}}) is None
    assert within_grant(p, {"network": {"allow": ["API.github.com"]}}) is None  # the same entry, spelled otherwise
    assert "not in the granted" in within_grant(p, {"network": {"allow": ["evil.test:443"]}})
    assert "not in the granted" in within_grant(p, {"network": {"allow": ["pypi.org"]}})  # port 80 too: wider
    assert "operator's files" in within_grant(p, {"network": {"tls_ca_file": {"a.test": "/etc/passwd"}}})
    assert "not among the hosts" in within_grant(p, {"secrets": {"GH": {"hosts": ["pypi.org"]}}})


def test_an_egress_event_becomes_an_audit_line_with_its_fields(tmp_path):
    log = AuditLog(tmp_path / "a.jsonl", redactor=Redactor({"GH": "ghp_real_value"}))
    rec = log.record_egress({"event": "egress", "client": "172.20.0.3", "host": "evil.test", "port": 80,
                             "method": "POST", "path": "/c", "bytes_up": 10, "bytes_down": 0, "decision": "refused",
                             "reason": "runner egress: the placeholder of secret GH ... ghp_real_value",
                             "intercepted": False, "secrets": [], "exfiltration": True}, session="s1", tenant="t")
    assert (rec["tool"], rec["status"], rec["error_type"], rec["session"], rec["tenant"]) == (
        "egress", "error", "gated", "s1", "t")
    e = rec["egress"]
    assert e["exfiltration"] and e["decision"] == "refused" and (e["host"], e["port"], e["method"]) == ("evil.test", 80, "POST")
    assert "ghp_real_value" not in (tmp_path / "a.jsonl").read_text()
    ok = log.record_egress({"host": "api.github.com", "port": 443, "decision": "allowed", "intercepted": True,
                            "secrets": ["GH"], "bytes_up": 5, "bytes_down": 7})
    assert ok["status"] == "ok" and ok["output_bytes"] == 7 and ok["egress"]["secrets"] == ["GH"]


def test_update_policy_needs_an_egress_to_change(tmp_path):
    from runner import Runner

    r = Runner(executor="docker", workspace=tmp_path)  # network none: nothing started, nothing to change
    try:
        with pytest.raises(RunnerError, match="network mode is none"):
            r.update_policy({"network": {"allow": ["pypi.org:443"]}})
    finally:
        r.close()
