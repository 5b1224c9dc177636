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
