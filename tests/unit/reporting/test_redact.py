"""Redaction: configured secrets in every encoding, rules for common key formats, and ordinary
text left exactly as it was."""
from __future__ import annotations

import base64
import json
import urllib.parse
import uuid

import pytest

from runner.reporting.redact import PREFILTER_MAX, RULES, Redactor, redact, secret_variants
from runner.results import ToolResult

SECRET = "hunter2-Sup3r/secret+value"


@pytest.fixture
def r() -> Redactor:
    return Redactor({"DB_PASSWORD": SECRET})


def test_raw_secret(r):
    assert r.redact(f"password is {SECRET}.") == "password is [REDACTED:secret]."


def test_secret_inside_json(r):
    text = json.dumps({"config": {"db": {"password": SECRET, "note": 'has "quotes"'}}})
    out = r.redact(text)
    assert SECRET not in out and json.loads(out)["config"]["db"]["password"] == "[REDACTED:secret]"


def test_secret_with_json_escapes():
    s = 'pa"ss\\word-123'
    text = json.dumps({"p": s})
    assert s not in Redactor([s]).redact(text) and 'pa\\"ss' not in Redactor([s]).redact(text)


@pytest.mark.parametrize("prefix", [b"", b"u", b"us", b"user:", b"xy:"])
def test_base64_of_secret_at_any_alignment(r, prefix):
    for enc in (base64.b64encode, base64.urlsafe_b64encode):
        blob = enc(prefix + SECRET.encode() + b"@tail").decode()
        out = r.redact(f"Authorization-ish: {blob}")
        assert "[REDACTED:secret]" in out
        # nothing that decodes back to most of the secret remains
        rest = out.split("[REDACTED:secret]")
        assert all(len(part) < len(blob) // 2 + 12 for part in rest)


def test_basic_auth_header_with_secret(r):
    hdr = "Authorization: Basic " + base64.b64encode(f"admin:{SECRET}".encode()).decode()
    assert "[REDACTED:" in r.redact(hdr)
    plain = "X-Other: " + base64.b64encode(f"admin:{SECRET}".encode()).decode()
    assert "[REDACTED:secret]" in r.redact(plain)


def test_url_encoded_secret(r):
    for enc in (urllib.parse.quote(SECRET, safe=""), urllib.parse.quote_plus(SECRET), urllib.parse.quote(SECRET)):
        assert r.redact(f"https://h/?p={enc}&x=1") == "https://h/?p=[REDACTED:secret]&x=1"


def test_short_secrets_ignored_and_empty_ok():
    assert secret_variants("abc") == set()
    assert Redactor(["abc", ""]).redact("abc abcd") == "abc abcd"
    assert Redactor().redact("") == ""


def test_longest_form_wins():
    r = Redactor(["secret-one", "secret-one-longer"])
    assert r.redact("x secret-one-longer y") == "x [REDACTED:secret] y"


def test_add_secret():
    r = Redactor()
    r.add_secret("late-secret-42")
    assert r.redact("v=late-secret-42") == "v=[REDACTED:secret]"


# -- rules -------------------------------------------------------------------------------------
AWS_KEY = "AKIAIOSFODNN7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
GHP = "ghp_" + "aB3" * 12
JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIiwiaWF0IjoxNTE2MjM5MDIyfQ."
       "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c")
PEM = ("-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA1c7+9z5Pad7OejecsQ0bu3aumgsqBTKqLc0fCzcXgtDo+6Ke\n"
       "R3hHn0aMKNVQ8s5DJ4e5ikQRbAbpvYzqhBQ1E9iHhdP7DMu3sR1fIoxAe6l+8Dpr\n-----END RSA PRIVATE KEY-----")


RULE_CASES = [
    (f"key {AWS_KEY} here", "key [REDACTED:aws-access-key] here"),
    ("ASIAY34FZKBOKMUTVV7A", "[REDACTED:aws-access-key]"),
    (f"aws_secret_access_key = {AWS_SECRET}", "aws_secret_access_key = [REDACTED:aws-secret-key]"),
    (f'"AWS_SECRET_ACCESS_KEY": "{AWS_SECRET}"', '"AWS_SECRET_ACCESS_KEY": "[REDACTED:aws-secret-key]"'),
    (f"export AWS_SESSION_TOKEN={AWS_SECRET}xyzABC", "export AWS_SESSION_TOKEN=[REDACTED:aws-secret-key]"),
    (f"token: {GHP}", "token: [REDACTED:github-token]"),
    ("gho_" + "x" * 36, "[REDACTED:github-token]"),
    ("ghs_" + "Z9" * 18 + " end", "[REDACTED:github-token] end"),
    ("github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUV",
     "[REDACTED:github-token]"),
    ("OPENAI_API_KEY=sk-abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKL", "OPENAI_API_KEY=[REDACTED:openai-key]"),
    ("sk-proj-Ab3dEf6hIj9kLmNoPqRsTuVwXyZ_-0123456789abcdef", "[REDACTED:openai-key]"),
    ("key=sk-ant-api03-" + "Xy1_" * 20 + "AA", "key=[REDACTED:anthropic-key]"),
    ("Authorization: Bearer abc123.def456-ghi", "Authorization: Bearer [REDACTED:authorization]"),
    ('headers = {"Authorization": "Bearer tok_live_0123456789"}', 'headers = {"Authorization": "Bearer [REDACTED:authorization]"}'),
    ("curl -H 'authorization: token 0123456789abcdef'", "curl -H 'authorization: token [REDACTED:authorization]'"),
    ("got bearer Zm9vYmFyMTIzNDU2Nzg5 from server", "got bearer [REDACTED:bearer-token] from server"),
    (f"jwt={JWT}", "jwt=[REDACTED:jwt]"),
    (f"prefix-text-{JWT};suffix", "prefix-text-[REDACTED:jwt];suffix"),
    (f"glued{JWT}", "glued[REDACTED:jwt]"),
    (f"before\n{PEM}\nafter", "before\n[REDACTED:private-key]\nafter"),
    ("https://alice:s3cr3t@example.com/repo.git", "https://alice:[REDACTED:url-credentials]@example.com/repo.git"),
    ("postgres://u:p%40ss@db:5432/x", "postgres://u:[REDACTED:url-credentials]@db:5432/x"),
    ("redis://:hunter22@cache:6379", "redis://:[REDACTED:url-credentials]@cache:6379"),
    ("xoxb-1234567890-abcdefghij", "[REDACTED:slack-token]"),
    ("AIzaSyA-1234567890abcdefghijklmnopqrstu", "[REDACTED:google-api-key]"),
    ("sk_live_" + "a1B2" * 6, "[REDACTED:stripe-key]"),
]


@pytest.mark.parametrize("text, expected", RULE_CASES)
def test_rules(text, expected):
    assert redact(text) == expected
    # the same past PREFILTER_MAX, where no search for every rule's guards and leads comes first
    pad = "ordinary words, nothing secret here\n" * (PREFILTER_MAX // 36 + 1)
    assert redact(pad + text) == pad + expected


@pytest.mark.parametrize("rule", [r for r in RULES if r.lead], ids=lambda r: r.kind)
def test_a_rules_lead_starts_each_of_its_matches(rule):
    """Short text that holds none of a rule's leads skips the rule: sound only if every match
    starts with one (here each case's text, and the case mixed to other letter cases)."""
    found = 0
    for text, _ in RULE_CASES:
        for variant in (text, text.lower(), text.upper(), text.swapcase()):
            for m in rule.pattern.finditer(variant):
                found += 1
                assert m.group(0).startswith(rule.lead), (rule.kind, m.group(0))
    assert found, f"no case exercises {rule.kind}"


def test_pem_variants():
    ec = PEM.replace("RSA PRIVATE", "EC PRIVATE")
    assert redact(ec) == "[REDACTED:private-key]"
    openssh = PEM.replace("RSA PRIVATE", "OPENSSH PRIVATE")
    assert redact(openssh) == "[REDACTED:private-key]"
    plain = PEM.replace("RSA PRIVATE", "PRIVATE")
    assert redact(plain) == "[REDACTED:private-key]"
    cut = PEM.split("-----END")[0]  # truncated output: no END line
    out = redact(cut + "\n")
    assert "MIIE" not in out and out.startswith("[REDACTED:private-key]")
    escaped = json.dumps({"key": PEM})  # one line with \n escapes
    out = redact(escaped)
    assert "MIIE" not in out and json.loads(out) == {"key": "[REDACTED:private-key]"}
    public = "-----BEGIN PUBLIC KEY-----\nMIIBIjANBgkq\n-----END PUBLIC KEY-----"
    assert redact(public) == public


def test_jwt_inside_longer_string_and_json():
    s = json.dumps({"headers": {"cookie": f"session={JWT}; Path=/"}})
    out = redact(s)
    assert JWT not in out and "[REDACTED:jwt]" in out and "Path=/" in out


def test_rule_inside_url_credentials_keeps_one_marker():
    out = redact(f"https://x-access-token:{GHP}@github.com/o/r.git")
    assert out == "https://x-access-token:[REDACTED:github-token]@github.com/o/r.git"


def test_authorization_header_with_github_token():
    out = redact(f'curl -H "Authorization: token {GHP}" https://api.github.com')
    assert GHP not in out and out.count("[REDACTED:") == 1


# -- what must stay untouched ----------------------------------------------------------------------
ORDINARY = [
    "commit 3f786850e387550fdab836ed7e6dc881de23001b",
    "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391 and 0123456789abcdef0123456789abcdef01234567",
    str(uuid.UUID("123e4567-e89b-12d3-a456-426614174000")),
    "request id 9b2c0a6e-1f3d-4f4e-9a9b-6d1b2c3d4e5f failed",
    "sha256:2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824",
    "the bearer authentication scheme is described in RFC 6750",
    "authorization = request.headers.get('Authorization')",
    "pip install scikit-learn; sk-learn-compatible-estimators-for-everyone",
    "task-manager-0123456789012345678901 and desk-sk-lamp",
    "see https://example.com:8080/path?q=1#frag and ssh://git@github.com/x",
    "user@example.com wrote: mailto:user@example.com",
    "AKIA is a prefix, AKIAshort is not a key",
    "aws_region = us-east-1; aws_secret_access_key_file = ~/.aws/creds",
    "eyJhbGciOiJIUzI1NiJ9 alone is only a header",
    "base64: SGVsbG8gV29ybGQ= and hex: deadbeefcafebabe",
    "Ünïcödé ✓ and emoji 🎉 stay",
    "def f(token):\n    return token.strip()\n",
    "ghp_short and gho_ and github_pat_",
]


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_text_untouched(text):
    r = Redactor({"X": "an-unrelated-secret-999"})
    assert r.redact(text) == text


def test_redact_obj_nested():
    r = Redactor({"P": SECRET})
    obj = {"args": {"cmd": f"echo {SECRET}", "list": [1, 2.5, None, True, f"x {GHP}"], "t": ("a", SECRET)},
           SECRET: "key-is-secret", "n": 3}
    out = r.redact_obj(obj)
    assert out["args"]["cmd"] == "echo [REDACTED:secret]"
    assert out["args"]["list"] == [1, 2.5, None, True, "x [REDACTED:github-token]"]
    assert out["args"]["t"] == ("a", "[REDACTED:secret]")
    assert out["[REDACTED:secret]"] == "key-is-secret" and out["n"] == 3
    assert obj["args"]["cmd"] == f"echo {SECRET}"  # input not modified


def test_redact_obj_tool_result_and_image_data():
    r = Redactor({"P": SECRET})
    res = ToolResult(content=f"leaked {SECRET}", meta={"note": GHP})
    out = r.redact_obj(res)
    assert isinstance(out, ToolResult) and out.content == "leaked [REDACTED:secret]"
    assert out.meta["note"] == "[REDACTED:github-token]"
    img = {"type": "image", "data": base64.b64encode(b"\x89PNG plain pixels").decode(), "media_type": "image/png"}
    assert r.redact_obj(img) == img
    # An image whose bytes or base64 hold a secret is withheld whole, with a note (issue 10, case 13).
    for data in ("AKIAIOSFODNN7EXAMPLE", base64.b64encode(f"px {SECRET} px".encode()).decode()):
        out = r.redact_obj({"type": "image", "data": data, "media_type": "image/png"})
        assert out["type"] == "text" and "withheld by redaction" in out["text"] and SECRET not in str(out)


def test_bytes():
    assert Redactor([SECRET]).redact_bytes(f"a {SECRET} \xff".encode("latin-1", "ignore")) .startswith(b"a [REDACTED")


def test_megabyte_is_redacted_whole():
    """A megabyte of ordinary text keeps its size and loses only the token at its end
    (speed is measured by the bench, never asserted here)."""
    line = "commit 3f786850e387550fdab836ed7e6dc881de23001b the bearer of news; secret session token\n"
    text = line * (1_000_000 // len(line))
    r = Redactor({"A": SECRET, "B": "another-secret-value"})
    out = r.redact(text + GHP)
    assert out == text + "[REDACTED:github-token]"


def test_dict_keys_are_redacted_again_once_a_secret_is_added():
    """Keys are remembered once redacted (a call's meta has the same ones each time); a secret
    added later is still found in a key seen before, and numbers and None pass as they are."""
    r = Redactor({})
    obj = {"s3cr3t-value-123": 1, "n": None, "f": 1.5, "b": True}
    assert r.redact_obj(obj) == obj
    r.add_secret("s3cr3t-value-123")
    assert r.redact_obj(obj) == {"[REDACTED:secret]": 1, "n": None, "f": 1.5, "b": True}
