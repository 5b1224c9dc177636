"""The presets as parsed (policies/parsed.json): a Runner of a preset imports no YAML parser, the
file is current, and it is used only for the very text it was made of."""
from __future__ import annotations

import hashlib
import json
import subprocess
import sys

import pytest

from runner.policy import PolicyError, load, loader


def test_the_parsed_presets_are_current():
    """After a preset changed: .venv/bin/python -c 'from runner.policy import loader; loader.write_parsed()'"""
    assert json.loads(loader.PARSED_FILE.read_text()) == loader.parsed_presets()


def test_a_preset_loads_without_the_yaml_parser_and_as_its_yaml_says():
    code = ("import sys\nfrom runner.policy import load\n"
            "p = load('default'); q = load('ci')\n"
            "print('yaml' in sys.modules, p.name, q.name, p.source.endswith('default.yaml'))")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.stdout.split() == ["False", "default", "ci", "True"], p.stderr
    for name in loader.preset_names():
        fast = load(name)
        slow = loader._validate(loader._read_chain(loader.find_policy(name), None, []))
        assert fast.model_dump(mode="json") == slow.model_dump(mode="json") and fast.source == slow.source, name


def _with_parsed(tmp_path, monkeypatch, memory: str, sha: str | None = None):
    text = (loader.BUILTIN_DIR / "default.yaml").read_text()
    parsed = loader.parsed_presets()
    parsed["default.yaml"]["data"]["limits"]["memory"] = memory
    if sha is not None:
        parsed["default.yaml"]["sha256"] = sha
    else:
        assert parsed["default.yaml"]["sha256"] == hashlib.sha256(text.encode()).hexdigest()
    f = tmp_path / "parsed.json"
    f.write_text(json.dumps(parsed))
    monkeypatch.setattr(loader, "PARSED_FILE", f)


def test_the_parsed_data_is_used_only_for_the_text_it_was_made_of(tmp_path, monkeypatch):
    _with_parsed(tmp_path, monkeypatch, "7g")
    assert load("default").limits.memory == 7 << 30  # (the parsed file is what was read)
    _with_parsed(tmp_path, monkeypatch, "7g", sha="0" * 64)
    assert load("default").limits.memory == 1 << 30  # another text's: the YAML


def test_parsed_data_the_model_refuses_gives_way_to_the_yaml(tmp_path, monkeypatch):
    _with_parsed(tmp_path, monkeypatch, "lots")
    assert load("default").limits.memory == 1 << 30
    monkeypatch.setattr(loader, "PARSED_FILE", tmp_path / "none.json")
    with pytest.raises(PolicyError):
        load("no-such-preset")
