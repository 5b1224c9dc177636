"""Image recipes: a prepare.sh fills the build context; an optional recipe that this machine
cannot build is skipped with the reason, while asking for it by name fails with that reason."""
from __future__ import annotations

import pytest

from runner.cli import images

NODE = images.RECIPES["runner/node:latest"]


def test_prepare_copies_the_folder_and_runs_prepare_sh(tmp_path):
    lines = []
    images._prepare(images.RECIPES["runner/base:latest"], tmp_path / "ctx", lines.append)
    assert (tmp_path / "ctx" / "Dockerfile").exists()
    wheels = list((tmp_path / "ctx" / "wheels").glob("lupa-*-cp311-*.whl"))
    assert len(wheels) == 1 and any("lupa" in line for line in lines)


def test_no_node_means_cannot_build_with_the_reason(tmp_path, monkeypatch):
    monkeypatch.setenv("NODE", str(tmp_path / "no-such-node"))
    with pytest.raises(images.CannotBuild, match="no node binary"):
        images._prepare(NODE, tmp_path / "ctx", lambda line: None)


def test_an_optional_recipe_is_skipped_but_not_when_asked_for(docker_client, tmp_path, monkeypatch):
    monkeypatch.setenv("NODE", str(tmp_path / "no-such-node"))
    real = images.status
    monkeypatch.setattr(images, "status", lambda client, r: ("missing", None) if r is NODE else real(client, r))
    said = []
    assert images.build(docker_client, progress=said.append) == []
    assert any(line.startswith("images: skipped runner/node:latest (optional): node: no node binary") for line in said)
    with pytest.raises(images.CannotBuild):
        images.build(docker_client, "node", progress=said.append)
