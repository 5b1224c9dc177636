"""Python tools registered in the `runner.tools` entry-point group.

The example package (examples/tools/python-entry-point) is "installed" into a fresh site
directory on sys.path (its code plus a dist-info with entry_points.txt), so the test touches no
environment. The controller finds the entry points from metadata alone: it never imports the
package; the sandbox does, from read-only mounts on docker."""
from __future__ import annotations

import importlib
import json
import sys
import tomllib

import pytest

from .conftest import EXAMPLES

PKG = EXAMPLES / "python-entry-point"


def install_dist(site, name: str, version: str, modules: dict, entry_points: dict, requires=()):
    """Write a distribution into `site` like pip would: modules ({relative path: source}) and a
    dist-info with METADATA, entry_points.txt, top_level.txt and RECORD."""
    for rel, src in modules.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(src)
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    meta = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"] + [f"Requires-Dist: {r}" for r in requires]
    (info / "METADATA").write_text("\n".join(meta) + "\n")
    (info / "entry_points.txt").write_text("[runner.tools]\n" + "".join(f"{k} = {v}\n" for k, v in entry_points.items()))
    tops = sorted({rel.split("/")[0].removesuffix(".py") for rel in modules})
    (info / "top_level.txt").write_text("\n".join(tops) + "\n")
    (info / "RECORD").write_text("".join(f"{rel},,\n" for rel in modules))


@pytest.fixture
def site(tmp_path, monkeypatch):
    s = tmp_path / "site"
    s.mkdir()
    monkeypatch.syspath_prepend(str(s))
    yield s
    importlib.invalidate_caches()


@pytest.fixture
def example(site):
    project = tomllib.loads((PKG / "pyproject.toml").read_text())["project"]
    src = PKG / "src" / "runner_example_tools"
    modules = {f"runner_example_tools/{f.name}": f.read_text() for f in src.glob("*.py")}
    install_dist(site, project["name"], project["version"], modules, project["entry-points"]["runner.tools"])
    importlib.invalidate_caches()
    return site


def test_entry_points_describe_and_run_in_the_sandbox(make_runner, workspace, example):
    (workspace / "prices.csv").write_text("item,price\napple,1.5\npear,2\nfig,0.5\n")
    r = make_runner()
    tools = {s.name: s for s in r.tools() if s.source == "python"}
    assert set(tools) == {"slugify", "csv_stats"}
    slug, stats = tools["slugify"], tools["csv_stats"]
    assert (slug.kind, slug.path) == ("python", "runner_example_tools:slugify")
    assert slug.description == "Turn a title into a URL slug."
    assert "max_length" in slug.guidance
    schema = slug.schema()
    assert schema["required"] == ["text"]
    assert schema["properties"]["max_length"] == {"type": "integer", "default": 60}
    assert stats.description.startswith("Sum, minimum and maximum") and "instead of writing a script" in stats.guidance
    assert stats.schema()["required"] == ["path", "column"]
    assert r.call("slugify", {"text": "Hello, World of Sandboxes!"}).content == "hello-world-of-sandboxes"
    assert r.call("slugify", {"text": "a b", "separator": "_"}).content == "a_b"
    res = r.call("csv_stats", {"path": "prices.csv", "column": "price"})
    assert not res.is_error, res.content
    assert json.loads(res.content) == {"count": 3, "sum": 4.0, "min": 0.5, "max": 2.0}
    res = r.call("slugify", {"text": "!!!"})
    assert res.is_error and res.content == "ValueError: the text has no letters or digits"
    res = r.call("slugify", {"text": "x", "max_length": "long"})
    assert res.is_error and "max_length" in res.content  # validated on the controller
    assert "runner_example_tools" not in sys.modules  # the controller never imported it


def test_entry_point_code_runs_only_in_the_sandbox(make_runner, workspace, site, tmp_path, executor):
    """A package whose import writes a marker next to itself: on docker the import happens in
    the container, where that folder is a read-only mount, so the host never gets the marker."""
    marker = site / "imported-here"
    source = '''import pathlib
MARK = pathlib.Path(__file__).resolve().parent / "imported-here"
try:
    MARK.write_text("x")
    WROTE = "wrote"
except OSError:
    WROTE = "refused"


def peek() -> str:
    """Say what the import did."""
    return WROTE
'''
    install_dist(site, "sneaky", "0.1", {"sneaky_tool.py": source}, {"peek": "sneaky_tool:peek"})
    importlib.invalidate_caches()
    r = make_runner()
    assert "peek" in {s.name for s in r.tools()}  # described: imported, in the sandbox
    assert "sneaky_tool" not in sys.modules  # never in the controller
    if executor == "docker":
        assert not marker.exists()
        assert r.call("peek", {}).content == "refused"
        assert not marker.exists()
    else:  # local has no isolation: the import happens in the agent's processes on this machine
        assert r.call("peek", {}).content == "wrote" and marker.exists()


def test_broken_entry_points_are_skipped_with_the_reason(make_runner, workspace, site):
    install_dist(site, "broken-tools", "0.1", {
        "broken_tools/__init__.py": "def nodoc(x: int) -> int:\n    return x\n\n\ndef documented() -> str:\n    \"Fine.\"\n    return \"ok\"\n",
        "broken_import.py": "import not_a_module_anywhere\n",
        "slow_import.py": "import time\ntime.sleep(60)\n",
    }, {"nodoc": "broken_tools:nodoc", "missing_attr": "broken_tools:nothing_here", "bad_import": "broken_import:f",
        "slow": "slow_import:f", "9lives": "broken_tools:documented",
        "fine": "broken_tools:documented"})
    importlib.invalidate_caches()
    # 10 s: the six entries are described at once, each a Python process of its own, and 2 s was
    # tight at load 11 (one run reported no bad name for 9lives: a describe timeout is the likeliest why)
    r = make_runner(**{"tools.describe_timeout": 10})
    names = {s.name for s in r.tools()}
    assert "fine" in names and not names & {"nodoc", "missing_attr", "bad_import", "slow", "9lives"}
    why = {e["path"]: e["error"] for e in r.custom_errors()}
    assert "add a docstring" in why["broken_tools:nodoc"]
    assert "nothing_here" in why["broken_tools:nothing_here"]
    assert "not_a_module_anywhere" in why["broken_import:f"]
    assert "did not finish within 10s" in why["slow_import:f"]
    assert any("bad tool name '9lives'" in e["error"] for e in r.custom_errors())


def test_policy_can_turn_entry_points_off(make_runner, workspace, example):
    r = make_runner(**{"tools.entry_points": False})
    assert not [s for s in r.tools() if s.source == "python"]


def test_the_package_comes_from_its_record_not_the_current_directory(make_runner, workspace, example, tmp_path,
                                                                       monkeypatch):
    """Run as `python -m runner` from some directory, '' is on the controller's sys.path: a
    same-named module there must not be what gets mounted or imported."""
    here = tmp_path / "cwd"
    here.mkdir()
    (here / "runner_example_tools.py").write_text("def slugify(text: str) -> str:\n    '''Impostor.'''\n"
                                                  "    return 'impostor'\n")
    monkeypatch.chdir(here)
    monkeypatch.syspath_prepend("")
    importlib.invalidate_caches()
    r = make_runner()
    assert r.call("slugify", {"text": "Real One"}).content == "real-one"


def test_the_group_is_found_from_entry_points_txt_and_the_first_of_a_name_wins(tmp_path):
    """custom.group_entry_points reads only entry_points.txt (no METADATA parse) and still takes
    what importlib.metadata takes: the first distribution of a name on the path, even one that
    has no such group (a later one of the same name with tools is shadowed), entry points sorted."""
    from importlib.metadata import distributions

    from runner.tools import custom

    first, later = tmp_path / "first", tmp_path / "later"
    first.mkdir()
    later.mkdir()
    install_dist(first, "Shadow_Pkg", "2.0", {"shadow_pkg.py": ""}, {})
    (first / "Shadow_Pkg-2.0.dist-info" / "entry_points.txt").write_text("[console_scripts]\nshadow = x:y\n")
    install_dist(later, "shadow-pkg", "1.0", {"shadow_pkg.py": ""}, {"shadowed": "shadow_pkg:run"})
    install_dist(later, "other", "1.0", {"other_mod.py": ""}, {"zeta": "other_mod:z", "alpha": "other_mod:a"})
    eps = custom.group_entry_points([str(first), str(later)])
    assert [(ep.name, ep.value) for ep in eps] == [("alpha", "other_mod:a"), ("zeta", "other_mod:z")]
    assert all(ep.dist is not None and ep.dist.metadata["Name"] == "other" for ep in eps)
    # the same answer as reading every METADATA (what it replaced)
    seen, slow = set(), []
    for dist in distributions(path=[str(first), str(later)]):
        key = custom._norm(dist.metadata["Name"])
        if key not in seen:
            seen.add(key)
            slow += [(ep.name, ep.value) for ep in dist.entry_points if ep.group == custom.ENTRY_POINT_GROUP]
    assert sorted(slow) == [(ep.name, ep.value) for ep in eps]
    assert [ep.name for ep in custom.group_entry_points([str(later)])] == ["alpha", "shadowed", "zeta"]  # unshadowed
