"""Custom tools: every format through the real Runner, on `local` and `docker`.

The example tools of examples/tools/ are copied into the places a user would put them; HOME
points at a fresh directory so the user place (~/.config/runner/tools) is the test's own."""
from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from runner import Runner

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "tools"
PLUGIN = EXAMPLES / "plugin" / "notes_plugin.py"


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("HOME", str(h))
    return h


@pytest.fixture(autouse=True)
def _discoveries(request, monkeypatch):
    """Every discovery of the test's runners (seconds, tools found, errors), shown when it fails:
    twice in CI a local discovery came back without tools that were there, and said nothing."""
    seen = request.node.custom_discoveries = []
    real = Runner._discover

    def recording(self):
        t0 = time.monotonic()
        cat = real(self)
        seen.append((round(time.monotonic() - t0, 3), sorted(cat.tools), cat.errors))
        return cat

    monkeypatch.setattr(Runner, "_discover", recording)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    rep = (yield).get_result()
    if rep.failed and getattr(item, "custom_discoveries", None):
        rep.sections.append(("custom tool discoveries (seconds, tools, errors)",
                             "\n".join(repr(d) for d in item.custom_discoveries)))


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
