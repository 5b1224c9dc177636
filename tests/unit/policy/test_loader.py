"""Loading policies from YAML: every problem names its file, line and dotted path."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from runner.policy import Policy, PolicyError, check, load, load_text, preset_names, show


def write(tmp_path: Path, text: str, name: str = "p.yaml") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text).lstrip("\n"))
    return p


def problems(path: Path) -> list[str]:
    return check(str(path))


def test_misspelt_key_names_path_line_and_suggestion(tmp_path):
    p = write(tmp_path, """
        name: x
        limits:
          cpus: 1
          memroy: 512m
    """)
    out = problems(p)
    assert len(out) == 1
    assert out[0].endswith("p.yaml:4: limits.memroy: unknown key (did you mean memory?)")


def test_unknown_key_without_close_match_lists_known_keys(tmp_path):
    out = problems(write(tmp_path, "network:\n  zzz: 1\n"))
    assert "p.yaml:2: network.zzz: unknown key; known keys: mode, allow, search_endpoint" in out[0]


def test_unknown_top_level_key(tmp_path):
    out = problems(write(tmp_path, "name: a\ntool:\n  preset: coding\n"))
    assert out[0].endswith("p.yaml:2: tool: unknown key (did you mean tools?)")


def test_wrong_type_names_value_line(tmp_path):
    p = write(tmp_path, """
        limits:
          pids: many
    """)
    (msg,) = problems(p)
    assert "p.yaml:2: limits.pids:" in msg and "'many'" in msg


def test_bad_literal_suggests(tmp_path):
    (msg,) = problems(write(tmp_path, "sandbox:\n  executor: dokcer\n"))
    assert msg.endswith("p.yaml:2: sandbox.executor: 'dokcer' is not allowed (did you mean docker?); use docker | local | ssh | swarm")


def test_bad_size(tmp_path):
    (msg,) = problems(write(tmp_path, "limits:\n  memory: lots\n"))
    assert "p.yaml:2: limits.memory: bad size 'lots'" in msg


def test_size_true_is_refused(tmp_path):
    (msg,) = problems(write(tmp_path, "limits:\n  tmpfs: yes\n"))
    assert "limits.tmpfs" in msg and "not true/false" in msg


def test_nested_list_item_error_points_at_item(tmp_path):
    p = write(tmp_path, """
        mounts:
          - {source: /data, target: /data}
          - source: /x
            target: relative/path
    """)
    (msg,) = problems(p)
    assert "p.yaml:4: mounts[1].target:" in msg and "absolute" in msg


def test_unknown_key_inside_list_item(tmp_path):
    p = write(tmp_path, """
        mounts:
          - source: /x
            target: /x
            mdoe: ro
    """)
    (msg,) = problems(p)
    assert msg.endswith("p.yaml:4: mounts[0].mdoe: unknown key (did you mean mode?)")


def test_unknown_key_inside_named_mapping(tmp_path):
    p = write(tmp_path, """
        rate_limits:
          tools:
            bash: {capacity: 5, refil_per_second: 0.5}
    """)
    out = problems(p)
    assert any("p.yaml:3: rate_limits.tools.bash.refil_per_second: unknown key (did you mean refill_per_second?)" in m
               for m in out)
    assert any("rate_limits.tools.bash.refill_per_second: required key is missing" in m for m in out)


def test_several_problems_sorted_by_line(tmp_path):
    p = write(tmp_path, """
        approval: maybe
        limits:
          cpus: -1
        tools:
          preset: codng
    """)
    out = problems(p)
    lines = [int(m.split(":")[1]) for m in out]
    assert lines == sorted(lines) and len(out) == 3
    assert "did you mean coding?" in out[2]


def test_cross_field_rule_points_at_section(tmp_path):
    p = write(tmp_path, """
        name: n
        network:
          mode: none
          allow: ["pypi.org:443"]
    """)
    (msg,) = problems(p)
    assert "p.yaml:3: network: allow lists 1 host(s) but mode is none" in msg


def test_duplicate_key_is_an_error(tmp_path):
    p = write(tmp_path, """
        limits:
          memory: 1g
          memory: 2g
    """)
    (msg,) = problems(p)
    assert msg.endswith("p.yaml:3: limits.memory: duplicate key (first set on line 2)")


def test_invalid_yaml_reports_line(tmp_path):
    p = write(tmp_path, "limits:\n  memory: [1g\nname: x\n")
    (msg,) = problems(p)
    assert msg.endswith("p.yaml:3: invalid YAML: while parsing a flow sequence expected ',' or ']', but got ':'")


def test_top_level_must_be_mapping(tmp_path):
    (msg,) = problems(write(tmp_path, "- a\n- b\n"))
    assert "p.yaml:1: a policy is a mapping of settings, not a list" in msg


def test_empty_file_is_the_default_policy(tmp_path):
    p = load(str(write(tmp_path, "")))
    assert p.sandbox.executor == "docker" and p.network.mode == "none" and p.approval == "deny"
    assert p.name == "p"


def test_missing_file_and_unknown_preset():
    assert check("/nonexistent/x.yaml") == ["policy file /nonexistent/x.yaml does not exist"]
    with pytest.raises(PolicyError, match=r"unknown policy 'defualt' \(did you mean default\?\)"):
        load("defualt")


def test_env_policy_dir_is_searched_first(tmp_path, monkeypatch):
    (tmp_path / "default.yaml").write_text("name: mine\nlimits: {memory: 3g}\n")
    (tmp_path / "extra.yaml").write_text("name: extra\n")
    monkeypatch.setenv("RUNNER_POLICY_DIR", str(tmp_path))
    assert load("default").name == "mine"
    assert load("extra").name == "extra"
    assert {"extra", "default", "readonly"} <= set(preset_names())


def test_extends_merges_and_reports_lines_in_the_right_file(tmp_path):
    write(tmp_path, """
        name: base
        limits:
          memory: 2g
          pids: 100
        network:
          mode: allowlist
          allow: ["pypi.org:443"]
    """, "base.yaml")
    child = write(tmp_path, """
        extends: base.yaml
        name: child
        limits:
          pids: 50
    """, "child.yaml")
    p = load(str(child))
    assert (p.limits.memory, p.limits.pids, p.network.allow) == (2 * 1024**3, 50, ["pypi.org:443"])
    assert p.extends == "base.yaml"
    bad = write(tmp_path, "extends: base.yaml\nlimits:\n  pidz: 3\n", "bad.yaml")
    (msg,) = check(str(bad))
    assert "bad.yaml:3: limits.pidz: unknown key (did you mean pids?)" in msg


def test_extends_a_preset_by_name(tmp_path):
    p = load(str(write(tmp_path, "extends: multi-tenant\ntenant: acme\n")))
    assert p.sandbox.lifecycle == "per-call" and p.tenant == "acme" and p.rate_limits.session is not None


def test_extends_loop(tmp_path):
    write(tmp_path, "extends: b.yaml\n", "a.yaml")
    write(tmp_path, "extends: a.yaml\n", "b.yaml")
    with pytest.raises(PolicyError, match="extends makes a loop"):
        load(str(tmp_path / "a.yaml"))


def test_load_text():
    p = load_text("limits: {memory: 2g}\n")
    assert isinstance(p, Policy) and p.limits.memory == 2 * 1024**3
    with pytest.raises(PolicyError, match=r"<policy>:1: limits\.memroy: unknown key"):
        load_text("limits: {memroy: 2g}\n")


def test_show_prints_effective_yaml_and_masks_secret_values(tmp_path, monkeypatch):
    monkeypatch.setenv("GH_TOKEN_FOR_TEST", "ghp_" + "A1" * 18)
    p = write(tmp_path, """
        secrets:
          GITHUB_TOKEN: {from_env: GH_TOKEN_FOR_TEST}
        env:
          set: {DEBUG_HEADER: "Authorization: Bearer abc123def456"}
    """)
    out = show(str(p), protect=["secrets"])
    assert "ghp_" not in out and "abc123def456" not in out
    assert "GITHUB_TOKEN:" in out and "from_env: GH_TOKEN_FOR_TEST" in out
    assert "- secrets" in out and "memory: 1g" in out
    assert out.startswith("# policy p from ")


def test_show_local_dev_says_loudly_it_is_not_a_sandbox():
    out = show("local-dev")
    assert "# WARNING: executor local" in out and "NOT a sandbox" in out


def test_show_output_round_trips(tmp_path):
    out = show("multi-tenant")
    again = load_text(out)
    assert again.model_dump() == load("multi-tenant").model_dump() | {"name": again.name}
