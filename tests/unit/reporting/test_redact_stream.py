"""StreamRedactor: output that arrives in pieces is redacted as the whole would be, whatever the
cut points (a secret split across pieces included), and what is not a secret is not held long."""
from __future__ import annotations

import random

from runner.reporting.redact import STREAM_HOLD, Redactor, StreamRedactor

SECRET = "s3cr3t-VALUE-0123456789"
TEXT = ("hello " * 50 + SECRET + " mid " + "x" * 300 + SECRET + " ghp_" + "a" * 40 + " end\n"
        + "line\n" * 3 + SECRET[:5] + "\n") * 5


def streamed(r: Redactor, text: str, rng: random.Random) -> tuple[str, list[str]]:
    out: list[str] = []
    s = StreamRedactor(r, out.append)
    i = 0
    while i < len(text):
        n = rng.randint(1, 60)
        s.feed(text[i:i + n])
        i += n
    s.flush()
    return "".join(out), out


def test_any_cut_points_redact_as_the_whole_text_does():
    r = Redactor({"X": SECRET})
    rng = random.Random(43)
    for _ in range(200):
        got, _ = streamed(r, TEXT, rng)
        assert SECRET not in got and "ghp_aaaa" not in got
        assert got.count("[REDACTED:secret]") == 10 and got.count("[REDACTED:github-token]") == 5
        assert got.replace("[REDACTED:secret]", "").count("line\n") == 15  # nothing else lost


def test_a_secret_in_two_pieces_is_never_sent_in_part():
    r = Redactor({"X": SECRET})
    out: list[str] = []
    s = StreamRedactor(r, out.append)
    s.feed("a\nb\ntwo: " + SECRET[:9])
    assert out == ["a\nb\n"]  # the line that may hold a secret waits
    s.feed(SECRET[9:] + " after\nnext")
    assert out[-1] == "two: [REDACTED:secret] after\n"
    s.flush()
    assert out[-1] == "next"


def test_ended_lines_go_at_once_and_a_long_line_is_not_held_whole():
    r = Redactor({"X": SECRET})
    out: list[str] = []
    s = StreamRedactor(r, out.append)
    s.feed("ready\n")
    assert out == ["ready\n"]
    s.feed("." * (STREAM_HOLD * 4))
    assert len("".join(out)) >= STREAM_HOLD * 3


def test_base64_of_a_secret_split_across_pieces():
    import base64

    r = Redactor({"X": SECRET})
    enc = base64.b64encode(SECRET.encode()).decode()
    got, _ = streamed(r, ("x" * 290 + enc + "y" * 10) * 3, random.Random(1))
    assert enc not in got and got.count("[REDACTED:secret]") == 3
