"""The Policy model's rules, independent of YAML."""
from __future__ import annotations

import pytest
from pydantic import ValidationError

from executors.models import Limits
from runner.policy import Policy, PolicyError, SecretUnavailable
from runner.policy.model import format_size
from runner.tools.schemas.registry import gates


def test_defaults_are_hardened():
    p = Policy()
    assert p.sandbox.executor == "docker" and p.network.mode == "none" and p.approval == "deny"
    assert p.is_sandboxed and p.protect_git_hooks and p.env.allow == [] and p.secrets == {}


def test_extra_keys_forbidden_everywhere():
    for data in ({"x": 1}, {"limits": {"x": 1}}, {"limits": {"output": {"x": 1}}}, {"network": {"x": 1}},
                 {"rate_limits": {"tools": {"bash": {"capacity": 1, "refill_per_second": 1, "x": 1}}}},
                 {"secrets": {"A": {"from_env": "B", "x": 1}}}, {"mounts": [{"source": "/a", "target": "/a", "x": 1}]},
                 {"host_commands": [{"name": "p", "args_prefix": ["git"], "x": 1}]}, {"audit": {"x": 1}}):
        with pytest.raises(ValidationError, match="Extra inputs"):
            Policy.model_validate(data)


def test_sizes_reuse_parse_size_and_print_short():
    p = Policy.model_validate({"limits": {"memory": "512m", "tmpfs": 1048576, "max_write": "1.5m", "workspace": "2g"}})
    assert p.limits.memory == 512 * 1024**2 and p.limits.tmpfs == 1024**2
    assert p.limits.max_write == int(1.5 * 1024**2)
    d = p.dump()["limits"]
    assert (d["memory"], d["tmpfs"], d["workspace"]) == ("512m", "1m", "2g")
    assert format_size(1536) == "1536" or format_size(1536) == "1536"
    assert format_size(3 * 1024) == "3k" and format_size(1023) == "1023"


def test_sandbox_limits_is_executors_limits():
    lim = Policy.model_validate({"limits": {"memory": "256m", "cpus": 0.5, "pids": 64, "tmpfs": "32m"}}).limits
    s = lim.sandbox_limits()
    assert isinstance(s, Limits) and (s.memory, s.cpus, s.pids, s.tmpfs) == (256 * 1024**2, 0.5, 64, 32 * 1024**2)


def test_timeouts():
    lim = Policy.model_validate({"limits": {"timeout": 60, "max_timeout": 600, "tool_timeouts": {"bash": 300}}}).limits
    assert lim.timeout_for("read") == 60
    assert lim.timeout_for("bash") == 300
    assert lim.timeout_for("bash", 5000) == 600
    assert lim.timeout_for("bash", 10) == 10
    with pytest.raises(ValidationError, match="longer than max_timeout"):
        Policy.model_validate({"limits": {"timeout": 700, "max_timeout": 600}})
    with pytest.raises(ValidationError, match=r"bash \(900s\)"):
        Policy.model_validate({"limits": {"max_timeout": 600, "tool_timeouts": {"bash": 900}}})
    with pytest.raises(ValidationError):
        Policy.model_validate({"limits": {"tool_timeouts": {"bash": 0}}})


def test_tools_allow_deny_and_gates():
    coding = frozenset({"read", "write", "edit", "apply_patch", "bash", "ls", "glob", "grep"})
    p = Policy.model_validate({"tools": {"allow": ["git_status", "http_fetch"], "deny": ["edit"]},
                               "features": {"network_tools": False}})
    assert p.tool_gate("read", coding) is None
    assert p.tool_gate("git_status", coding) is None
    assert "tools.deny" in p.tool_gate("edit", coding)
    assert "features.network_tools: false" in p.tool_gate("http_fetch", coding)
    assert "not allowed" in p.tool_gate("git_log", coding)
    assert "features.network_tools: false" in p.tool_gate("git_push", coding)  # it reaches the network
    ro = Policy.model_validate({"features": {"bash": False, "writes": False}})
    assert "features.bash" in ro.tool_gate("bash", coding)
    assert "features.writes" in ro.tool_gate("write", coding)
    assert gates()["writes"] >= {"write", "edit", "apply_patch"}


def test_allow_and_deny_overlap_refused():
    with pytest.raises(ValidationError, match="both allowed and denied"):
        Policy.model_validate({"tools": {"allow": ["bash"], "deny": ["bash"]}})


def test_bad_tool_names_and_preset():
    with pytest.raises(ValidationError, match="bad tool name"):
        Policy.model_validate({"tools": {"allow": ["rm -rf /"]}})
    with pytest.raises(ValidationError, match="did you mean readonly"):
        Policy.model_validate({"tools": {"preset": "readonyl"}})


@pytest.mark.parametrize("bad", ["*.org:443", "pypi.org:0", "pypi.org:70000", "py pi.org:443", "http://x:80",
                                 "[nothex]:443", ":443", "a..b:1"])
def test_network_allow_entries_refused(bad):
    with pytest.raises(ValidationError):
        Policy.model_validate({"network": {"mode": "allowlist", "allow": [bad]}})


def test_network_allow_entries_accepted_and_normalised():
    p = Policy.model_validate({"network": {"mode": "allowlist",
                                           "allow": ["PyPI.org:443", "10.0.0.1:8080", "[::1]:80", "*.github.com:443",
                                                     "pypi.org", "10.0.0.0/24:443"]}})
    assert p.network.allow == ["pypi.org:443", "10.0.0.1:8080", "[::1]:80", "*.github.com:443", "pypi.org",
                               "10.0.0.0/24:443"]  # no port: 80 and 443, as the agent and the proxy read it


def test_network_allow_needs_allowlist_mode():
    with pytest.raises(ValidationError, match="mode is none"):
        Policy.model_validate({"network": {"allow": ["a.com:443"]}})


def test_mounts():
    p = Policy.model_validate({"mounts": [{"source": "data", "target": "/data/"}]})
    m = p.mounts[0]
    assert m.mode == "ro" and m.target == "/data"
    assert str(m.host_path("/w")) == "/w/data"
    for bad in ({"source": "/a", "target": "rel"}, {"source": "/a", "target": "/"},
                {"source": "/a", "target": "/x/../etc"}, {"source": "/a", "target": "/a", "mode": "rwx"}):
        with pytest.raises(ValidationError):
            Policy.model_validate({"mounts": [bad]})
    with pytest.raises(ValidationError, match="two mounts on /a"):
        Policy.model_validate({"mounts": [{"source": "/a", "target": "/a"}, {"source": "/b", "target": "/a"}]})


@pytest.mark.parametrize("bad", ["/etc", "../up", "a/../../b", ".", "", "a\x00b"])
def test_protect_paths_must_stay_in_workspace(bad):
    with pytest.raises(ValidationError):
        Policy.model_validate({"protect": [bad]})


def test_protect_paths_normalised():
    assert Policy.model_validate({"protect": ["./a//b/", "c"]}).protect == ["a/b", "c"]


def test_secrets_sources_and_resolution(tmp_path):
    f = tmp_path / "tok"
    f.write_text("file-secret-value\n")
    p = Policy.model_validate({"secrets": {"GH": {"from_env": "GH_TOKEN"}, "F": {"from_file": str(f)},
                                           "OPT": {"from_env": "NOPE", "required": False}},
                               "env": {"allow": ["LANG"], "set": {"X": "1"}}})
    env = {"GH_TOKEN": "env-secret-value", "LANG": "C", "OTHER": "no"}
    assert p.resolve_secrets(env) == {"GH": "env-secret-value", "F": "file-secret-value"}
    assert p.sandbox_env(env) == {"X": "1", "LANG": "C", "GH": "env-secret-value", "F": "file-secret-value"}
    with pytest.raises(SecretUnavailable, match="secret GH: environment variable GH_TOKEN is not set"):
        p.resolve_secrets({})
    with pytest.raises(ValidationError, match="exactly one of from_env or from_file"):
        Policy.model_validate({"secrets": {"A": {}}})
    with pytest.raises(ValidationError, match="exactly one"):
        Policy.model_validate({"secrets": {"A": {"from_env": "X", "from_file": "/y"}}})
    with pytest.raises(ValidationError, match="bad environment variable name"):
        Policy.model_validate({"secrets": {"A-B": {"from_env": "X"}}})
    with pytest.raises(ValidationError, match="both a secret and an env entry"):
        Policy.model_validate({"secrets": {"A": {"from_env": "X"}}, "env": {"allow": ["A"]}})


def test_secret_values_never_in_dump(tmp_path):
    p = Policy.model_validate({"secrets": {"GH": {"from_env": "GH_TOKEN"}}})
    p.resolve_secrets({"GH_TOKEN": "s3cr3t-value-xyz"})
    assert "s3cr3t" not in p.to_yaml()


def test_rate_limits_and_host_commands():
    p = Policy.model_validate({"rate_limits": {"session": {"capacity": 10, "refill_per_second": 1},
                                               "tools": {"bash": {"capacity": 5, "refill_per_second": 0.5}}},
                               "host_commands": [{"name": "git", "args_prefix": ["push"]}, {"name": "gh"}]})
    assert p.rate_limits.tools["bash"].capacity == 5 and p.host_commands[0].args_prefix == ["push"]
    assert p.host_commands[1].args_prefix == []  # any gh command
    for bad in ({"capacity": 0, "refill_per_second": 1}, {"capacity": 1, "refill_per_second": 0}, {"capacity": 1}):
        with pytest.raises(ValidationError):
            Policy.model_validate({"rate_limits": {"session": bad}})
    with pytest.raises(ValidationError):
        Policy.model_validate({"host_commands": [{"args_prefix": ["push"]}]})
    with pytest.raises(ValidationError):
        Policy.model_validate({"host": {"host": "h", "user": "u"}})  # no key_file, no known_hosts


def test_tenant_name():
    assert Policy(tenant="acme-1").tenant == "acme-1"
    with pytest.raises(ValidationError):
        Policy(tenant="../etc")


def test_local_warnings():
    p = Policy.model_validate({"sandbox": {"executor": "local", "workspace": "ro"}, "warning": "careful"})
    w = p.warnings()
    assert "NOT a sandbox" in w[0] and any("cannot be enforced" in x for x in w) and w[-1] == "careful"


def test_effective_applies_protect_env_and_overrides(tmp_path):
    p = Policy.model_validate({"protect": ["a"]})
    e = p.effective(protect=["b", "./a"], environ={"RUNNER_PROTECT_DIRS": "c:d/e::"},
                    overrides={"limits.memory": "2g", "sandbox.executor": "local", "limits.tool_timeouts.bash": 30,
                               "rate_limits.tools.bash.capacity": 3, "rate_limits.tools.bash.refill_per_second": 1})
    assert e.protect == ["a", "b", "c", "d/e"]
    assert e.limits.memory == 2 * 1024**3 and e.sandbox.executor == "local" and e.limits.tool_timeouts == {"bash": 30}
    assert e.rate_limits.tools["bash"].capacity == 3
    assert p.protect == ["a"] and p.limits.memory == 1024**3  # the original is untouched


def test_effective_absolute_protect_inside_workspace(tmp_path):
    e = Policy().effective(protect=[str(tmp_path / "x" / "y")], environ={}, workspace=tmp_path)
    assert e.protect == ["x/y"]


def test_effective_reports_bad_overrides():
    with pytest.raises(PolicyError) as ei:
        Policy().effective(protect=["../out"], environ={"RUNNER_PROTECT_DIRS": "/etc"},
                           overrides={"limits.memroy": "1g", "nosuch.section.x": 1})
    msg = str(ei.value)
    assert "--protect: protected path '../out' leaves the workspace" in msg
    assert "RUNNER_PROTECT_DIRS: protected path '/etc' is absolute" in msg
    assert "nosuch.section.x: unknown setting" in msg
    with pytest.raises(PolicyError, match=r"limits\.memroy: unknown key \(did you mean memory\?\)"):
        Policy().effective(environ={}, overrides={"limits.memroy": "1g"})
    with pytest.raises(PolicyError, match=r"sandbox\.executor: 'k8s' is not allowed"):
        Policy().effective(environ={}, overrides={"sandbox.executor": "k8s"})
