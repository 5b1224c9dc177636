"""runner/untrusted/printable.py and runner/untrusted/boundedjson.py: the helpers every command uses for text that
came from the workspace, the sandbox or a call."""
from __future__ import annotations

import io
import json

import pytest

from runner.untrusted.boundedjson import MAX_DEPTH, depth, lines, loads
from runner.untrusted.printable import json_text, printable

NASTY = "a\nb\rc\x1b[2J\x07\x00\x7f\x85\x9b\u2028\u2029\u202e\u2066\u061c\u200f\td"


def test_printable_escapes_every_control_character():
    out = printable(NASTY)
    assert out == ("a\\nb\\rc\\x1b[2J\\x07\\x00\\x7f\\x85\\x9b\\u2028\\u2029\\u202e\\u2066\\u061c\\u200f\\td")
    assert out.isprintable() and len(out.splitlines()) == 1


def test_printable_with_newlines_keeps_lines_and_tabs_only():
    out = printable(NASTY, newlines=True)
    assert out.startswith("a\nb\\rc\\x1b") and out.endswith("\td") and "\x1b" not in out
    assert printable("plain text, ünïcode ✓ 漢字") == "plain text, ünïcode ✓ 漢字"


def test_json_text_is_the_same_value_on_one_line():
    obj = {"id": NASTY, "n": [1, None, "漢字"]}
    text = json_text(obj)
    assert json.loads(text) == obj and len(text.splitlines()) == 1 and text.isprintable()
    assert "漢字" in text  # UTF-8 kept
    assert json.loads(json_text(obj, indent=2)) == obj


def test_loads_answers_value_errors_only():
    assert loads('{"a": [1, 2]}') == {"a": [1, 2]}
    for bad, says in [("[" * 100_000, "nested too deeply"), ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "nested"),
                      ("{nope", "not valid JSON"), (b"\xff\xfe", "not UTF-8")]:
        with pytest.raises(ValueError, match=says):
            loads(bad)
    assert loads("[" * MAX_DEPTH + "]" * MAX_DEPTH) is not None


def test_depth_without_recursion():
    x: list = []
    for _ in range(100_000):
        x = [x]
    assert depth(x, stop_after=10) == 11 and depth({"a": {"b": 1}}) == 2 and depth("s") == 0


def test_lines_bounds_each_line_and_drops_the_rest_of_a_long_one():
    data = b"short\n" + b"x" * 100 + b"\nok\n" + b"y" * 10 + b"\n" + b"tail"
    got = list(lines(io.BytesIO(data), 10))
    assert got == [(1, b"short\n"), (2, None), (3, b"ok\n"), (4, b"y" * 10 + b"\n"), (5, b"tail")]
