"""The documents' claims point at tests that exist: SECURITY.md and RELIABILITY.md name the test
behind each defended case (`tests/FILE.py::test_name`, and `::test_name` for one more in the file
named last), and the conformance checks by their names in executors/conformance.py."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ("SECURITY.md", "RELIABILITY.md", "README.md", "DESIGN.md", "TOOLS.md")
CITE = re.compile(r"(tests/[\w/.-]+\.py)(?:::(\w+))?|::(\w+)")
CHECK = re.compile(r"conformance `(\w+)`")
ELSEWHERE = {"test_exec_as_user"}  # a check of inspect_ai's sandbox self-check (README, inspect), not ours


def _citations(doc: str) -> list[tuple[int, str, str | None]]:
    """(line, file, test or None) of each citation, a `::name` taking the file named last."""
    out, last = [], None
    for n, line in enumerate((ROOT / doc).read_text().splitlines(), 1):
        for m in CITE.finditer(line):
            path, name, more = m.groups()
            if path:
                last = path
                out.append((n, path, name))
            else:
                out.append((n, last or "(no file named before it)", more))
    return out


@pytest.mark.parametrize("doc", DOCS)
def test_every_cited_test_exists_in_the_file_named(doc):
    missing = []
    for n, path, name in _citations(doc):
        f = ROOT / path
        if not f.is_file():
            missing.append(f"{doc}:{n}: no file {path}")
        elif name and not re.search(rf"^\s*(?:async\s+)?def {name}\(", f.read_text(), re.M):
            missing.append(f"{doc}:{n}: no {name} in {path}")
    assert not missing, "\n".join(missing)


def test_every_conformance_check_named_exists():
    from executors import conformance

    named = {(doc, m) for doc in DOCS for m in CHECK.findall((ROOT / doc).read_text())}
    assert named, "the documents name conformance checks"
    assert not {(doc, m) for doc, m in named if m not in conformance.CHECKS}


def test_every_test_named_alone_exists_somewhere():
    """A row that names a test without its file (`test_name`) names one the suite has (or a
    test file, by its stem)."""
    sources = "\n".join(p.read_text() for p in (ROOT / "tests").rglob("test_*.py"))
    stems = {p.stem for p in (ROOT / "tests").rglob("test_*.py")}
    defined = set(re.findall(r"^\s*(?:async\s+)?def (test_\w+)\(", sources, re.M))
    missing = [f"{doc}: {name}" for doc in DOCS
               for name in re.findall(r"(?<![:/\w])`?(test_\w+)", (ROOT / doc).read_text())
               if name not in defined | stems | ELSEWHERE]
    assert not missing, "\n".join(missing)
