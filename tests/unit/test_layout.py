"""The README's Layout section names what the tree holds, and the tool contract it cites is in
the repository."""
from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def layout() -> str:
    text = (REPO / "README.md").read_text()
    return text[text.index("## Layout"):].split("```")[1]


def test_every_top_level_entry_and_package_is_in_the_layout():
    block = layout()
    tracked = {p.name for p in REPO.iterdir() if not p.name.startswith(".") and p.name not in (
        "README.md", "SECURITY.md", "Makefile", "pyproject.toml", "__pycache__", "build") and not p.name.endswith(
        ".egg-info")}
    for name in sorted(tracked):
        assert re.search(rf"^{re.escape(name)}/?\s", block, re.M), f"{name} is not in README's Layout"
    for pkg in sorted(p.name for p in (REPO / "runner").iterdir() if (p / "__init__.py").exists()):
        assert f"{pkg}/" in block, f"runner/{pkg}/ is not in README's Layout"
    for mod in ("allowlist.py", "conformance.py", "base.py"):
        assert mod in block


def test_the_tool_contract_is_in_the_repository():
    assert (REPO / "TOOLS.md").read_text().startswith("# The tool contract")
    assert "[TOOLS.md](TOOLS.md)" in (REPO / "README.md").read_text()


def test_the_top_of_runner_is_a_handful_of_modules_and_the_layers():
    top = sorted(p.name for p in (REPO / "runner").glob("*.py"))
    assert top == ["__init__.py", "__main__.py", "client.py", "errors.py", "results.py"]
    packages = sorted(p.name for p in (REPO / "runner").iterdir() if (p / "__init__.py").exists())
    assert packages == ["agent", "backends", "cli", "controller", "host", "policy", "reporting", "servers", "tools",
                        "untrusted"]


def test_no_module_is_shadowed_by_a_name_of_its_packages_init():
    """`from runner.cli import tools` gave runner.cli's function, not the module: a package's
    __init__ defines no name that is one of its modules."""
    import ast

    clashes = []
    for init in (REPO / "runner").rglob("__init__.py"):
        pkg = init.parent
        subs = {p.stem for p in pkg.glob("*.py")} | {p.name for p in pkg.iterdir() if (p / "__init__.py").exists()}
        for node in ast.parse(init.read_text()).body:
            names = [node.name] if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)) else [
                t.id for t in getattr(node, "targets", []) if isinstance(t, ast.Name)]
            clashes += [f"{init.relative_to(REPO)}: {n}" for n in names if n in subs - {"__init__"}]
    assert clashes == []


def test_the_servers_and_the_controller_do_not_import_the_command_line():
    """Dependencies point one way: cli -> servers -> controller; make_runner lives beside Runner."""
    import re

    offenders = [f"{f.relative_to(REPO)}:{i}" for d in ("servers", "controller", "tools", "reporting", "host",
                                                        "untrusted", "backends", "policy")
                 for f in (REPO / "runner" / d).rglob("*.py")
                 for i, line in enumerate(f.read_text().splitlines(), 1)
                 if re.search(r"^\s*from\s+(runner\.cli|\.+cli)\b|^\s*import\s+runner\.cli\b", line)]
    # `runner exec`'s options, which serve's exec endpoint shares, are being rewritten elsewhere; they
    # move beside the docker backend's one-shot run with that change
    assert [o for o in offenders if not o.startswith("runner/servers/serve/app.py")] == []
