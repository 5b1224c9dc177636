"""apply_patch parsing and hunk placement; glob and .gitignore matching."""
from __future__ import annotations

import pytest

from runner.agent import patch
from runner.agent.context import Context
from runner.agent.globs import expand_braces, match
from runner.agent.ignore import Ignore
from runner.agent.result import ToolError


def test_envelope_parse_all_sections():
    ops = patch.parse("*** Begin Patch\n*** Add File: n.txt\n+a\n\n+b\n*** Update File: u.py\n*** Move to: v.py\n"
                      "@@ class A:\n@@ def f(self):\n-  x\n+  y\n*** End of File\n*** Delete File: d.txt\n*** End Patch")
    assert [(o.kind, o.path, o.move_to) for o in ops] == [("add", "n.txt", None), ("update", "u.py", "v.py"),
                                                          ("delete", "d.txt", None)]
    assert ops[0].lines == ["a", "", "b"]
    h = ops[1].hunks[0]
    assert (h.anchors, h.old, h.new, h.eof) == (["class A:", "def f(self):"], ["  x"], ["  y"], True)


@pytest.mark.parametrize("text, why", [
    ("", "empty"),
    ("*** Begin Patch\n*** Update File: a\n@@\n-x\n+y\n", "End Patch"),
    ("*** Begin Patch\nnonsense\n*** End Patch", "expected `\\*\\*\\* Add File:"),
    ("*** Begin Patch\n*** Add File: a\nno plus\n*** End Patch", "starts with `\\+`"),
    ("*** Begin Patch\n*** Update File: a\n*** End Patch", "has no hunks"),
    ("just some words", "changes no file"),
])
def test_parse_errors_say_what_is_wrong(text, why):
    with pytest.raises(ToolError, match=why):
        patch.parse(text)


def test_unified_diff_with_git_headers_renames_and_dev_null():
    text = ("diff --git a/x.py b/x.py\nindex 1..2 100644\n--- a/x.py\n+++ b/x.py\n@@ -1,3 +1,3 @@ def f\n a\n-b\n+B\n c\n"
            "@@ -10 +10 @@\n-j\n+J\n"
            "diff --git a/old.txt b/new.txt\nsimilarity index 100%\nrename from old.txt\nrename to new.txt\n"
            "--- /dev/null\n+++ b/added.txt\n@@ -0,0 +1,2 @@\n+1\n+2\n"
            "--- a/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n")
    ops = patch.parse(text)
    assert [(o.kind, o.path, o.move_to) for o in ops] == [
        ("update", "x.py", None), ("update", "old.txt", "new.txt"), ("add", "added.txt", None),
        ("delete", "gone.txt", None)]
    assert [(h.hint, h.old, h.new) for h in ops[0].hunks] == [(1, ["a", "b", "c"], ["a", "B", "c"]),
                                                              (10, ["j"], ["J"])]
    assert ops[2].lines == ["1", "2"]
    assert patch.touched_paths(text) == ["x.py", "old.txt", "new.txt", "added.txt", "gone.txt"]


def test_touched_paths_of_garbage_is_empty():
    assert patch.touched_paths("hello") == []


def test_hunks_prefer_the_occurrence_nearest_the_hint():
    lines = ["x", "same", "y"] * 3
    h = patch.Hunk()
    h.old, h.new, h.hint = ["same"], ["SAME"], 8
    assert patch.apply_hunks(lines, [h], "f") == ["x", "same", "y", "x", "same", "y", "x", "SAME", "y"]


def test_hunks_tolerate_trailing_whitespace_then_indentation():
    h = patch.Hunk()
    h.old, h.new = ["def f():", "return 1"], ["def f():", "    return 2"]
    assert patch.apply_hunks(["def f():   ", "    return 1"], [h], "f") == ["def f():", "    return 2"]


def test_pure_insertions():
    h = patch.Hunk()
    h.new, h.hint = ["new"], 1  # `@@ -1,0 +2 @@`: after line 1
    assert patch.apply_hunks(["a", "b"], [h], "f") == ["a", "new", "b"]
    h2 = patch.Hunk()
    h2.new = ["tail"]
    assert patch.apply_hunks(["a"], [h2], "f") == ["a", "tail"]


def test_failed_hunk_names_the_line_and_both_texts():
    h = patch.Hunk()
    h.old, h.new = ["a", "b", "c"], ["a", "c"]
    with pytest.raises(ToolError) as e:
        patch.apply_hunks(["a", "b", "x", "d"], [h], "f.txt")
    msg = str(e.value)
    assert "hunk 1 of 1 in f.txt" in msg and "near line 3" in msg and "'c'" in msg and "'x'" in msg


def test_apply_patch_keeps_missing_final_newline_and_bom(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"\xef\xbb\xbfone\ntwo")
    ctx = Context(str(tmp_path))
    res = patch.apply_patch(ctx, {"patch": "*** Begin Patch\n*** Update File: a.txt\n@@\n-two\n+2\n*** End Patch"})
    assert not res.is_error, res
    assert (tmp_path / "a.txt").read_bytes() == b"\xef\xbb\xbfone\n2"


def test_add_over_an_existing_file_is_refused(tmp_path):
    (tmp_path / "a.txt").write_text("x")
    with pytest.raises(ToolError, match="already exists"):
        patch.apply_patch(Context(str(tmp_path)), {"patch": "*** Begin Patch\n*** Add File: a.txt\n+y\n*** End Patch"})


def test_two_ops_on_one_file_chain(tmp_path):
    (tmp_path / "a.txt").write_text("1\n2\n")
    res = patch.apply_patch(Context(str(tmp_path)), {"patch": "*** Begin Patch\n*** Update File: a.txt\n@@\n-1\n+one\n"
                                                              "*** Update File: a.txt\n@@\n-2\n+two\n*** End Patch"})
    assert not res.is_error and (tmp_path / "a.txt").read_text() == "one\ntwo\n"


# -- globs ----------------------------------------------------------------------------------
@pytest.mark.parametrize("pattern, path, hit", [
    ("*.py", "a.py", True), ("*.py", "src/a.py", False), ("**/*.py", "a.py", True), ("**/*.py", "x/y/a.py", True),
    ("src/**", "src/a/b", True), ("src/**/test_*.py", "src/test_a.py", True), ("src/**/test_*.py", "src/k/test_a.py", True),
    ("a?c", "abc", True), ("a?c", "a/c", False), ("[ab].txt", "b.txt", True), ("[!ab].txt", "c.txt", True),
    ("*.{ts,tsx}", "x.tsx", True), ("*.{ts,tsx}", "x.js", False), ("a/**/b", "a/b", True),
])
def test_glob_match(pattern, path, hit):
    assert match(pattern, path) is hit


def test_brace_expansion():
    assert expand_braces("a{b,c{d,e}}f") == ["abf", "acdf", "acef"]
    assert expand_braces("{x}") == ["{x}"]


def test_gitignore_subset():
    ig = Ignore("# comment\n\n*.log\nbuild/\n/top.txt\ndocs/*.md\n!keep.log\n")
    assert ig.ignored("a.log", False) and ig.ignored("deep/b.log", False)
    assert not ig.ignored("keep.log", False)
    assert ig.ignored("build", True) and not ig.ignored("build", False)
    assert ig.ignored("top.txt", False) and not ig.ignored("sub/top.txt", False)
    assert ig.ignored("docs/x.md", False) and not ig.ignored("docs/sub/x.md", False)
