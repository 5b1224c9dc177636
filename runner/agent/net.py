"""http_fetch / web_fetch and web_search, under the policy's network rules."""
from __future__ import annotations

import html.parser
import ipaddress
import json
import socket
import urllib.parse
import urllib.request

from .context import Ctx, ToolError

try:
    from . import allowlist  # the grammar, shipped in the agent's bundle (runner/controller/bundle.py)
except ImportError:  # runner/agent imported in place on the controller (tests): the same file
    from executors import allowlist

ALLOWED_HEADERS = {"accept", "user-agent", "accept-language"}
MAX_REDIRECTS = 10


def _rules(ctx: Ctx) -> list:
    """The policy's allowlist in the one grammar (the policy checked it already)."""
    try:
        return allowlist.parse(ctx.net_allow)
    except ValueError as e:
        raise ToolError(f"the policy's network allowlist is not valid here: {e}") from None


def check_url(ctx: Ctx, url: str):
    """Refuse before any socket opens: scheme, policy mode, allowlist, resolved addresses."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ToolError(f"only http and https URLs are fetched, not {parts.scheme or 'a bare path'}: {url}")
    host = parts.hostname
    if not host:
        raise ToolError(f"the URL names no host: {url}")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    if ctx.net_mode == "none":
        raise ToolError(f"network access is off in this sandbox (policy network mode none): {host} was not contacted")
    rules = _rules(ctx)
    if not allowlist.allowed(rules, host, port):
        raise ToolError(f"{host}:{port} is not in the policy's network allowlist; nothing was sent")
    if ctx.proxy:
        return  # the egress proxy resolves the name and refuses local and private addresses itself
    try:
        infos = socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)
    except OSError as e:
        raise ToolError(f"could not resolve {host}: {e}") from None
    for info in infos:
        addr = ipaddress.ip_address(info[4][0])
        bad = addr.is_link_local or addr.is_loopback or addr.is_private or addr.is_multicast or addr.is_reserved \
            or addr.is_unspecified or addr in ipaddress.ip_network("100.64.0.0/10")
        if bad and not allowlist.address_allowed(rules, addr, port):
            raise ToolError(f"{host} resolves to {addr}, a link-local, private or local address that the policy "
                            "does not list; nothing was sent")


class _Text(html.parser.HTMLParser):
    SKIP = {"script", "style", "noscript", "template", "svg"}
    BLOCK = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section", "article", "pre", "table"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out, self.skip = [], 0

    def handle_starttag(self, tag, attrs):
        if tag in self.SKIP:
            self.skip += 1
        elif tag in self.BLOCK:
            self.out.append("\n")

    def handle_endtag(self, tag):
        if tag in self.SKIP and self.skip:
            self.skip -= 1
        elif tag in self.BLOCK:
            self.out.append("\n")

    def handle_data(self, data):
        if not self.skip:
            self.out.append(data)

    def text(self) -> str:
        lines = [" ".join(x.split()) for x in "".join(self.out).split("\n")]
        return "\n".join(x for x in lines if x)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *a, **k):
        return None


def http_fetch(ctx: Ctx, args: dict):
    url = args["url"]
    max_bytes = int(args.get("max_bytes") or 50 * 1024)
    timeout = float(args.get("timeout") or 30)
    headers = {}
    for k, v in (args.get("headers") or {}).items():
        if k.lower() not in ALLOWED_HEADERS:
            raise ToolError(f"header {k} is not allowed: only accept, user-agent and accept-language")
        headers[k] = str(v)
    headers.setdefault("User-Agent", "runner-http-fetch/1")
    proxies = {"http": ctx.proxy, "https": ctx.proxy} if ctx.proxy else {}
    opener = urllib.request.build_opener(_NoRedirect, urllib.request.ProxyHandler(proxies))
    hops = []
    for _ in range(MAX_REDIRECTS + 1):
        check_url(ctx, url)
        req = urllib.request.Request(url, headers=headers, method="GET")
        try:
            resp = opener.open(req, timeout=timeout)
        except urllib.error.HTTPError as e:
            resp = e
        except OSError as e:
            raise ToolError(f"fetching {url} failed: {getattr(e, 'reason', e)}") from None
        status = resp.status if hasattr(resp, "status") else resp.code
        if status in (301, 302, 303, 307, 308) and resp.headers.get("Location"):
            nxt = urllib.parse.urljoin(url, resp.headers["Location"])
            hops.append(f"{status} {url} -> {nxt}")
            resp.close()
            url = nxt
            continue
        break
    else:
        raise ToolError(f"more than {MAX_REDIRECTS} redirects; last: {url}")
    ctype = resp.headers.get("Content-Type", "")
    body = resp.read(max_bytes + 1)
    resp.close()
    cut = len(body) > max_bytes
    body = body[:max_bytes]
    charset = "utf-8"
    if "charset=" in ctype:
        charset = ctype.split("charset=")[-1].split(";")[0].strip() or "utf-8"
    try:
        text = body.decode(charset, errors="replace")
    except LookupError:
        text = body.decode("utf-8", errors="replace")
    if "html" in ctype.lower():
        p = _Text()
        p.feed(text)
        text = p.text()
    head = f"status: {status}\nurl: {url}\ncontent-type: {ctype}\nbytes: {len(body)}{' (cut at max_bytes)' if cut else ''}"
    if hops:
        head += "\nredirects: " + "; ".join(hops)
    return {"content": head + "\n\n" + text, "is_error": status >= 400,
            "meta": {"status": status, "url": url, "bytes": len(body), "truncated": cut}}


def web_search(ctx: Ctx, args: dict):
    if not ctx.search_endpoint:
        raise ToolError("web_search is not configured: the policy names no search endpoint (network.search_endpoint)")
    n = max(1, min(20, int(args.get("max_results") or 5)))
    url = ctx.search_endpoint + ("&" if "?" in ctx.search_endpoint else "?") + urllib.parse.urlencode(
        {"q": args["query"], "n": n})
    res = http_fetch(ctx, {"url": url, "max_bytes": 200 * 1024})
    text = res["content"].split("\n\n", 1)[-1]
    try:
        items = json.loads(text)
        if isinstance(items, dict):
            items = items.get("results") or []
        lines = [f"{i + 1}. {it.get('title', '')}\n   {it.get('url', '')}\n   {it.get('snippet', '')}"
                 for i, it in enumerate(items[:n])]
        return "\n".join(lines) or "no results"
    except (ValueError, AttributeError):
        return text
