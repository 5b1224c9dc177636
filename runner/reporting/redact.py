"""Redaction of secrets in tool results and audit records.

    r = Redactor({"GH_TOKEN": os.environ["GH_TOKEN"]})
    r.redact("token=ghp_…")              -> "token=[REDACTED:github-token]"
    r.redact_obj({"args": {"k": "…"}})   -> the same structure, every string redacted

Two sources: configured secret values (also their base64 — at any alignment, so a secret inside
`Basic base64(user:secret)` is caught — their hex, URL-encoded and JSON-escaped forms), and rules
for common key formats. An image block (base64 `data`) is checked on its decoded bytes and on its
base64 text; one that holds a secret is replaced by a text block saying so. Each match becomes `[REDACTED:kind]`. All patterns are compiled once; each
starts with a literal (which the regex engine finds at memchr speed) or has a cheap substring
guard, so ordinary output costs a handful of C-speed scans (about 10 ms per MB here). A short
string (a call's meta, a status line) is first searched once for all those literals, folded:
most hold none, and cost about 0.3 µs instead of 7.
"""
from __future__ import annotations

import base64
import json
import re
import urllib.parse
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

MIN_SECRET_LEN = 4  # shorter configured values would shred ordinary text; they are ignored
MIN_ENCODED_LEN = 8  # shortest base64 fragment of a secret that is worth matching
KEYS_KEPT = 512  # dict keys whose redaction a Redactor remembers
PREFILTER_MAX = 4096  # characters up to which all rules' guards and leads are searched for at once first


_TAG = re.compile(r"\[REDACTED:([a-z0-9-]+)\]")


def tag(kind: str) -> str:
    return f"[REDACTED:{kind}]"


@dataclass(frozen=True)
class Rule:
    """kind: what it finds; pattern: a compiled regex whose group `v` (or the whole match) is
    the secret; guards: substrings of which at least one must be in the text (case-insensitive
    when `fold`), else the rule is skipped: for patterns that cannot start with a literal."""

    kind: str
    pattern: re.Pattern
    guards: tuple[str, ...] = ()
    fold: bool = False
    not_after: frozenset[str] = frozenset()  # a match preceded by one of these is left alone
    lead: tuple[str, ...] = ()  # a pattern that starts with a literal: one of these starts every match


def _r(kind: str, regex: str, guards: tuple[str, ...] = (), flags: int = 0, fold: bool = False,
       not_after: str = "", lead: tuple[str, ...] = ()) -> Rule:
    return Rule(kind, re.compile(regex, flags), guards, fold, frozenset(not_after), lead)



# Patterns start with their literal so the regex engine can jump from one candidate to the next
# at memchr speed; the "not preceded by a token character" check is done on the match instead
# of with a look-behind, which would make the engine try every position.
_WORD = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_"


def _ci(word: str) -> str:
    """'bearer' -> '[Bb][Ee]…': case-insensitive, yet twice as fast as (?i:) in CPython's engine."""
    return "".join(f"[{c.upper()}{c.lower()}]" if c.isalpha() else re.escape(c) for c in word)


_TOK = r"A-Za-z0-9_\-"
RULES: tuple[Rule, ...] = (
    # PEM private keys: the whole block; a block cut short (truncated output) up to where its
    # base64 stops. \\n covers a block that sits JSON-escaped on one line.
    _r("private-key",
       r"-----BEGIN[A-Z0-9 ]{0,40} PRIVATE KEY( BLOCK)?-----"
       r"(?:.*?-----END[A-Z0-9 ]{0,40} PRIVATE KEY( BLOCK)?-----|[A-Za-z0-9+/=:,.\s\\-]*)",
       lead=("-----BEGIN",), flags=re.DOTALL),
    _r("aws-access-key", r"A(?:KIA|SIA|BIA|CCA|GPA|IDA|ROA|IPA|NPA|NVA|PKA)[A-Z0-9]{16}(?![A-Z0-9])",
       lead=("AKIA", "ASIA", "ABIA", "ACCA", "AGPA", "AIDA", "AROA", "AIPA", "ANPA", "ANVA", "APKA"), not_after=_WORD),
    # AWS secret keys and session tokens only in assignments: 40 base64 characters alone look
    # like too many ordinary things (a git SHA is 40 hex characters).
    _r("aws-secret-key",
       r"(?i:aws_?(?:secret_?access_?key|secret_?key|session_?token|security_?token)|secret_?access_?key)"
       r"[\"']?\s*(?:[:=]|=>)\s*[\"']?(?P<v>[A-Za-z0-9/+=]{40,})(?![A-Za-z0-9/+=])",
       ("access_key", "accesskey", "secret_key", "secretkey", "session_token", "sessiontoken",
        "security_token", "securitytoken"), fold=True),
    _r("github-token", rf"g(?:h[pousr]_[A-Za-z0-9]{{36,251}}|ithub_pat_[A-Za-z0-9_]{{22,251}})(?![{_TOK}])",
       lead=("ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_"), not_after=_WORD + "-"),
    _r("anthropic-key", rf"sk-ant-[{_TOK}]{{20,}}", lead=("sk-ant-",), not_after=_WORD + "-"),
    # OpenAI: sk-, sk-proj-, sk-svcacct-, sk-admin-; at least 20 characters and one digit, so
    # words like sk-learn-compatible-estimators stay.
    _r("openai-key", rf"sk-(?!ant-)(?=[{_TOK}]*[0-9])[{_TOK}]{{20,}}", lead=("sk-",), not_after=_WORD + "-"),
    _r("slack-token", r"xox[abposr]-[A-Za-z0-9-]{10,}", lead=("xox",), not_after=_WORD),
    _r("google-api-key", rf"AIza[{_TOK}]{{35}}(?![{_TOK}])", lead=("AIza",), not_after=_WORD + "-"),
    _r("stripe-key", r"[sr]k_live_[A-Za-z0-9]{20,}", ("_live_",), not_after=_WORD),
    # JWTs: the two eyJ… parts are distinctive enough to be caught even glued to other text.
    _r("jwt", r"eyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]*", lead=("eyJ",)),
    # Authorization headers: anything after the scheme. A bare "Bearer x" elsewhere only when the
    # token has a digit, so prose ("bearer authentication") stays.
    _r("authorization",
       _ci("authorization") + r"[\"']?\s*[:=]\s*[\"']?(?:(?:" + "|".join(_ci(w) for w in ("bearer", "basic", "token", "digest"))
       + r")\s+(?P<v>[^\s\"',;]{6,})|(?P<w>(?=[^\s\"',;]*[0-9])[^\s\"',;]{16,}))",
       ("authorization",), fold=True, not_after=_WORD),
    _r("bearer-token", _ci("bearer") + r"\s+(?P<v>(?=[A-Za-z0-9\-._~+/]*[0-9])[A-Za-z0-9\-._~+/]{8,}=*)", ("bearer",),
       fold=True, not_after=_WORD),
    # scheme://user:password@host: the password (the user may be empty, as in redis://:pw@h).
    _r("url-credentials", r"://[^\s:/?#@\"'<>\[\]]*:(?P<v>[^\s/?#@\"'<>]+)@", lead=("://",)),
)


def _b64_cores(raw: bytes) -> set[str]:
    """The part of base64(prefix + raw + suffix) that depends on raw only, for each of the three
    alignments, in the standard and URL-safe alphabets, plus the whole padded encodings."""
    out = {base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode()}
    n = len(raw)
    for s in range(3):
        enc = base64.b64encode(b"\0" * s + raw).decode()
        start = -(-8 * s // 6)  # first character made of raw's bits only
        end = (8 * (s + n)) // 6  # characters after this one mix in the unknown suffix
        core = enc[start:end]
        if len(core) >= MIN_ENCODED_LEN:
            out.add(core)
            out.add(core.replace("+", "-").replace("/", "_"))
    return out


def secret_variants(value: str) -> set[str]:
    """The forms of one secret value that are redacted: itself, base64 at any alignment,
    hex (either case), URL-encoded (both styles) and JSON-escaped."""
    if len(value) < MIN_SECRET_LEN:
        return set()
    out = {value}
    out |= _b64_cores(value.encode())
    out.add(urllib.parse.quote(value, safe=""))
    out.add(urllib.parse.quote_plus(value, safe=""))
    out.add(urllib.parse.quote(value))
    out.add(json.dumps(value)[1:-1])
    out.add(json.dumps(value, ensure_ascii=False)[1:-1])
    out.add(value.encode().hex())
    out.add(value.encode().hex().upper())
    return {v for v in out if len(v) >= MIN_SECRET_LEN}


class Redactor:
    """Replace secrets with `[REDACTED:kind]` in strings and in nested JSON-like structures.

    secrets: {NAME: value} (configured secrets, e.g. Policy.resolve_secrets()) or an iterable of
    values. Their kind is `secret`. rules: apply the built-in RULES (default True)."""

    def __init__(self, secrets: Mapping[str, str] | Iterable[str] = (), *, rules: bool | Iterable[Rule] = True,
                 secret_kind: str = "secret") -> None:
        values = secrets.values() if isinstance(secrets, Mapping) else secrets
        self.rules: tuple[Rule, ...] = RULES if rules is True else (tuple(rules) if rules else ())
        self.secret_kind = secret_kind
        self._values: set[str] = set()
        self._secret_re: re.Pattern | None = None
        self._keys: dict[str, str] = {}  # dict keys seen, redacted: a call's meta has the same ~10 each time
        # Short text (most of a call's strings: its meta, a status line) is first searched once
        # for every rule's guards and leads at once, folded: one C-speed search instead of a
        # Python-level pass per rule. Long text skips it (an alternation scans a megabyte slower
        # than the rules' own guards and literal-led patterns). Only when every rule has either.
        hints = [r.guards or r.lead for r in self.rules]
        self._maybe = None if not all(hints) or not hints else re.compile(
            "|".join(re.escape(g.lower()) for h in hints for g in h))
        for v in values:
            if v:
                self._values |= secret_variants(str(v))
        self._compile()

    def add_secret(self, value: str) -> None:
        self._values |= secret_variants(value)
        self._compile()

    def _compile(self) -> None:
        self._keys = {}  # a new secret may be in a key already seen
        if not self._values:
            self._secret_re = None
            return
        alts = sorted(self._values, key=len, reverse=True)  # longest first: a form wins over its part
        self._secret_re = re.compile("|".join(re.escape(v) for v in alts))

    # -- strings -------------------------------------------------------------------------------
    def redact(self, text: str) -> str:
        if not text:
            return text
        if self._secret_re is not None and any(v in text for v in self._values):
            text = self._secret_re.sub(tag(self.secret_kind), text)
        lower = None
        if self._maybe is not None and len(text) <= PREFILTER_MAX:
            lower = text.lower()
            if self._maybe.search(lower) is None:
                return text
        for rule in self.rules:
            if rule.guards:
                if rule.fold:
                    if lower is None:
                        lower = text.lower()
                    hay = lower
                else:
                    hay = text
                if not any(g in hay for g in rule.guards):
                    continue
            new = rule.pattern.sub(_replacer(rule.kind, rule.not_after), text)
            if new is not text and new != text:
                text, lower = new, None
        return text

    __call__ = redact

    def redact_bytes(self, data: bytes) -> bytes:
        return self.redact(data.decode("utf-8", errors="surrogateescape")).encode("utf-8", errors="surrogateescape")

    # -- structures ----------------------------------------------------------------------------
    def redact_obj(self, obj: Any) -> Any:
        """A copy of obj with every string (keys included) redacted, at any depth: dicts, lists,
        tuples, bytes, and pydantic models (rebuilt from their dump; returned as the plain dump
        when redaction changed its shape, as for an image block). An image block (a dict with
        type "image" and base64 data) that holds a secret becomes a text block saying so."""
        if isinstance(obj, str):
            return self.redact(obj)
        if obj is None or isinstance(obj, (int, float)):  # most of a meta's values
            return obj
        if isinstance(obj, dict):
            if obj.get("type") == "image" and "data" in obj:
                return self.redact_image(obj)
            return {(self._key(k) if isinstance(k, str) else k): self.redact_obj(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [self.redact_obj(v) for v in obj]
        if isinstance(obj, tuple):
            return tuple(self.redact_obj(v) for v in obj)
        if isinstance(obj, (bytes, bytearray)):
            return self.redact_bytes(bytes(obj))
        if hasattr(obj, "model_dump") and hasattr(type(obj), "model_validate"):
            dump = self.redact_obj(obj.model_dump())
            if isinstance(dump, dict) and dump.get("type") != getattr(obj, "type", dump.get("type")):
                return dump
            return type(obj).model_validate(dump)
        return obj

    def _key(self, key: str) -> str:
        """A dict key, redacted: short ones are remembered (up to KEYS_KEPT of them)."""
        done = self._keys.get(key)
        if done is None:
            done = self.redact(key)
            if len(key) <= 64 and len(self._keys) < KEYS_KEPT:
                self._keys[key] = done
        return done

    def redact_image(self, block: dict) -> dict:
        """The image block itself when neither its bytes nor its base64 hold a secret; else a
        text block that says the image was withheld (an image cannot be redacted in part)."""
        data = block.get("data")
        text = data if isinstance(data, str) else ""
        try:
            raw = base64.b64decode(text, validate=False) if text else b""
        except (ValueError, TypeError):
            raw = b""
        kinds = self.kinds(text) | self.kinds(raw.decode("utf-8", errors="surrogateescape"))
        if not isinstance(data, str) or kinds:
            what = ", ".join(sorted(kinds)) or "not base64 text"
            media = self.redact(str(block.get("media_type") or "image"))
            return {"type": "text", "text": f"[image {media} withheld by redaction: its bytes hold a secret ({what})]"}
        return {k: (v if k == "data" else self.redact_obj(v)) for k, v in block.items()}

    def spans(self, text: str, rules: bool = True) -> list[tuple[int, int]]:
        """(start, end) of what redact would look at in text: configured secrets' forms, and the
        rules' matches (guarded as redact guards them) when `rules`."""
        out = [m.span() for m in self._secret_re.finditer(text)] if self._secret_re is not None else []
        if not rules:
            return out
        lower = text.lower()
        for rule in self.rules:
            if rule.guards and not any(g in (lower if rule.fold else text) for g in rule.guards):
                continue
            out.extend(m.span() for m in rule.pattern.finditer(text))
        return out

    def kinds(self, text: str) -> set[str]:
        """The kinds of secrets found in text (empty: none)."""
        red = self.redact(text) if text else text
        if red == text:
            return set()
        return (set(_TAG.findall(red)) - set(_TAG.findall(text))) or {self.secret_kind}

    def contains_secret(self, text: str) -> bool:
        return self.redact(text) != text


def _replacer(kind: str, not_after: frozenset[str] = frozenset()) -> Callable[[re.Match], str]:
    t = tag(kind)

    def sub(m: re.Match) -> str:
        if not_after and m.start() > 0 and m.string[m.start() - 1] in not_after:
            return m.group(0)
        g = "v" if "v" in m.re.groupindex and m.group("v") is not None else (
            "w" if "w" in m.re.groupindex and m.group("w") is not None else None)
        if g is not None:
            if m.group(g).startswith("[REDACTED:"):
                return m.group(0)  # already redacted by an earlier, more specific rule
            s, e = m.span(g)
            base = m.start()
            whole = m.group(0)
            return whole[: s - base] + t + whole[e - base:]
        return t

    return sub


DEFAULT = Redactor()


def redact(text: str) -> str:
    """Redact with the rules only (no configured secrets)."""
    return DEFAULT.redact(text)


STREAM_HOLD = 256  # characters of an unfinished line a stream holds back: the built-in rules' tokens fit in it
STREAM_HOLD_MAX = 64 * 1024  # past this much held back, a rule's match still open is cut anyway


class StreamRedactor:
    """Text that arrives in pieces (a call's streamed output), redacted before `emit` sees it,
    a secret split across two pieces included. What may still become a secret is held back: a
    last line not yet ended (at most STREAM_HOLD characters of it: the rules' tokens end at a
    line's end), the longest end that begins a configured secret's form, and any match still
    open at the cut. `flush` sends what is left, redacted, at the end of the stream."""

    def __init__(self, redactor: Redactor, emit: Callable[[str], None]) -> None:
        self.redactor, self.emit = redactor, emit
        self.forms = sorted(redactor._values, key=len, reverse=True)
        self.pending = ""

    def feed(self, text: str) -> None:
        if not text:
            return
        buf = self.pending + text
        cut = self._cut(buf)
        self.pending = buf[cut:]
        if cut > 0:
            self.emit(self.redactor.redact(buf[:cut]))

    def flush(self) -> None:
        buf, self.pending = self.pending, ""
        if buf:
            self.emit(self.redactor.redact(buf))

    def _cut(self, buf: str) -> int:
        """Where buf may be cut: before its unfinished last line (up to STREAM_HOLD characters),
        before an end that starts a secret's form, never inside a match (a rule's may grow with
        the next piece, unless more than STREAM_HOLD_MAX is held)."""
        n = len(buf)
        cut = max(buf.rfind("\n") + 1, n - STREAM_HOLD)
        for form in self.forms:
            for k in range(min(len(form) - 1, n), n - cut, -1):  # only ends longer than what is held already
                if buf.endswith(form[:k]):
                    cut = n - k
                    break
        spans = self.redactor.spans(buf, rules=n - cut <= STREAM_HOLD_MAX)
        moved = True
        while moved:
            moved = False
            for s, e in spans:
                if s < cut < e:
                    cut, moved = s, True
        return cut
