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


# Modules that may name the Docker SDK or executors.docker: the docker executor and the docker
# backend. The swarm executor and backend drive a swarm's managers through the same SDK and its
# engine helpers (a backend of Docker engines too).
DOCKER_OWNERS = ("executors/docker/", "runner/backends/docker.py", "runner/backends/docker_engine.py",
                 "executors/swarm.py", "runner/backends/swarm.py")
NOT_YET: tuple[str, ...] = ()  # modules not moved yet: none (runner exec, its detached runs and runner images
# go through runner/backends/docker_engine.py, the docker backend's standard-library half)


def docker_imports(path: Path) -> list[str]:
    """`file:line module` of each import of docker (the SDK) or executors.docker in a module, at
    any depth (inside functions too), relative imports resolved."""
    import ast

    rel = path.relative_to(REPO)
    package = list(rel.with_suffix("").parts[:-1] if rel.name != "__init__.py" else rel.parent.parts)
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
            names = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        if any(n == "docker" or n.startswith("docker.") or n == "executors.docker" or n.startswith("executors.docker.")
               for n in names):
            out.append(f"{rel}:{node.lineno} {names[0]}")
    return out


def test_only_the_docker_backend_imports_docker():
    """Reaping, one-shot execs, doctor, freezing, serve's networks go through the docker backend
    (runner/backends/docker.py): no other module of runner or executors names the Docker SDK or
    executors.docker, not even inside a function."""
    offenders = [hit for top in ("runner", "executors") for f in sorted((REPO / top).rglob("*.py"))
                 if not str(f.relative_to(REPO)).startswith(DOCKER_OWNERS) for hit in docker_imports(f)]
    assert [o for o in offenders if not o.startswith(NOT_YET)] == []
    assert sorted({o.split(":")[0] for o in offenders}) == sorted(NOT_YET)


def test_the_import_scan_sees_imports_inside_functions_and_relative_ones(tmp_path, monkeypatch):
    """The scan above is no check that cannot fail: it finds each form of the import."""
    fake = REPO / "runner" / "_scan_probe_for_test.py"
    fake.write_text("def f():\n    import docker.errors\n    from executors.docker.wire import Engine\n"
                    "    from executors import docker\n    from ..executors.docker import labels\n"
                    "import executors.errors\n")
    try:
        assert [h.split(" ")[1] for h in docker_imports(fake)] == [
            "docker.errors", "executors.docker.wire", "executors", "executors.docker"]
    finally:
        fake.unlink()
