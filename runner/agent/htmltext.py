"""HTML to readable, Markdown-like text with the standard library's html.parser."""
from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import List, Optional

_SKIP = {"script", "style", "noscript", "template", "svg", "iframe", "object", "canvas", "head"}
_BLOCK = {"p", "div", "section", "article", "header", "footer", "main", "nav", "aside", "ul", "ol", "table", "tr",
          "blockquote", "form", "fieldset", "figure", "figcaption", "dl", "dt", "dd", "address", "details", "summary"}
_VOID = {"br", "hr", "img", "input", "meta", "link", "area", "base", "col", "embed", "source", "track", "wbr"}


class _Text(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: List[str] = []
        self.skip = 0
        self.pre = 0
        self.title: Optional[str] = None
        self._in_title = False
        self._href: Optional[str] = None
        self._link_text: List[str] = []

    def _emit(self, s: str) -> None:
        if self._href is not None:
            self._link_text.append(s)
        else:
            self.out.append(s)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "title":
            self._in_title = True
            return
        if tag in _SKIP:
            if tag not in _VOID:
                self.skip += 1
            return
        if self.skip:
            return
        if tag in ("h1", "h2", "h3", "h4", "h5", "h6"):
            self._emit("\n\n" + "#" * int(tag[1]) + " ")
        elif tag == "li":
            self._emit("\n- ")
        elif tag == "br":
            self._emit("\n")
        elif tag == "hr":
            self._emit("\n\n---\n\n")
        elif tag == "pre":
            self.pre += 1
            self._emit("\n\n```\n")
        elif tag in ("td", "th"):
            self._emit(" | ")
        elif tag == "img":
            alt = (a.get("alt") or "").strip()
            if alt:
                self._emit(f"[Image: {alt}]")
        elif tag == "a" and self._href is None:
            href = a.get("href") or ""
            if href.startswith(("http://", "https://")):
                self._href = href
                self._link_text = []
        elif tag in _BLOCK:
            self._emit("\n\n")

    def handle_endtag(self, tag):
        if tag == "title":
            self._in_title = False
            return
        if tag in _SKIP:
            self.skip = max(0, self.skip - 1)
            return
        if self.skip:
            return
        if tag == "a" and self._href is not None:
            text = " ".join("".join(self._link_text).split())
            href, self._href = self._href, None
            self.out.append(f"[{text}]({href})" if text else "")
        elif tag == "pre":
            self.pre = max(0, self.pre - 1)
            self._emit("\n```\n\n")
        elif tag in _BLOCK or tag in ("h1", "h2", "h3", "h4", "h5", "h6", "li"):
            self._emit("\n")

    def handle_data(self, data):
        if self._in_title:
            self.title = ((self.title or "") + data).strip()
            return
        if self.skip:
            return
        if self.pre:
            self._emit(data)
        else:
            self._emit(re.sub(r"\s+", " ", data))


def html_to_text(html: str) -> str:
    p = _Text()
    try:
        p.feed(html)
        p.close()
    except Exception:  # html.parser is lenient; a broken document still gives what was read
        pass
    text = "".join(p.out)
    lines = [ln.rstrip() for ln in text.split("\n")]
    cleaned: List[str] = []
    fenced = False
    for ln in lines:
        if ln.startswith("```"):
            fenced = not fenced
        elif not fenced:
            ln = ln.lstrip()
            if not ln and cleaned and not cleaned[-1]:
                continue
        cleaned.append(ln)
    body = "\n".join(cleaned).strip()
    if p.title and not body.startswith(p.title):
        body = f"# {p.title}\n\n{body}" if body else f"# {p.title}"
    return body
