"""Custom tools: every format through the real Runner, on `local` and `docker`.

The example tools of examples/tools/ are copied into the places a user would put them; HOME
points at a fresh directory so the user place (~/.config/runner/tools) is the test's own."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from runner import Runner

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tools"
PLUGIN = EXAMPLES / "plugin" / "notes_plugin.py"


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("HOME", str(h))
    return h


@pytest.fixture(params=["local", "docker"])
def executor(request):
    if request.param == "docker":
        request.getfixturevalue("no_leaks")
    return request.param


@pytest.fixture
def workspace(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    return ws


def install(dest: Path, *names: str) -> Path:
    """Copy example files (paths under examples/tools) into dest."""
    dest.mkdir(parents=True, exist_ok=True)
    for n in names:
        shutil.copy2(EXAMPLES / n, dest / Path(n).name)
    return dest


def script(dest: Path, name: str, text: str, mode: int = 0o755) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    p = dest / name
    p.write_text(text)
    p.chmod(mode)
    return p


@pytest.fixture
def make_runner(executor, workspace):
    made = []

    def make(**overrides):
        r = Runner(executor=executor, workspace=workspace, overrides=overrides)
        made.append(r)
        return r.start()

    yield make
    for r in made:
        r.close()
