"""http_fetch, web_fetch and web_search, under the policy's network rules.

With network mode `none` nothing is resolved or connected. With `allowlist`, the host (and
port) must be listed; every address the name resolves to is checked, and the connection goes
to a checked address (no second lookup that could answer differently). Link-local and cloud
metadata addresses are never reached; loopback, private and other non-public addresses only
when that exact host is listed. Every redirect hop is checked again.
"""
from __future__ import annotations

import http.client
import ipaddress
import json
import os
import re
import socket
import ssl
from typing import Dict, List, Optional, Tuple
from urllib.parse import quote_plus, urljoin, urlsplit

from . import fsutil
from .htmltext import html_to_text
from .result import Result, ToolError, error, ok

MAX_REDIRECTS = 10
DEFAULT_MAX_BYTES = 50 * 1024
DEFAULT_TIMEOUT = 30.0
SAFE_HEADERS = ("accept", "user-agent", "accept-language")
USER_AGENT = "runner-agent/0.1"
METADATA = {ipaddress.ip_address(a) for a in ("169.254.169.254", "169.254.170.2", "fd00:ec2::254",
                                                "100.100.100.200", "192.0.0.192")}
_TEXTUAL = re.compile(r"^(text/|application/(json|xml|xhtml\+xml|javascript|ld\+json|rss\+xml|atom\+xml)|.*\+json|.*\+xml)")


class Target:
    def __init__(self, url: str, scheme: str, host: str, port: int, path: str, ip: str) -> None:
        self.url, self.scheme, self.host, self.port, self.path, self.ip = url, scheme, host, port, path, ip


def _listed(ctx, host: str, port: int) -> Tuple[bool, bool]:
    """(host:port allowed by the allowlist, host named exactly rather than by a wildcard)."""
    allowed = exact = False
    for entry in ctx.network_allow:
        h, p = entry, None
        m = re.match(r"^(\[[^\]]+\]|[^:]+)(?::(\d+))?$", entry)
        if m:
            h, p = m.group(1).strip("[]"), int(m.group(2)) if m.group(2) else None
        if (p is not None and p != port) or (p is None and port not in (80, 443)):
            continue
        if h == host:
            allowed = exact = True
        elif h.startswith("*.") and (host.endswith(h[1:]) or host == h[2:]):
            allowed = True
    return allowed, exact


def _check_ip(ip: ipaddress._BaseAddress, host: str, exact: bool) -> None:
    mapped = getattr(ip, "ipv4_mapped", None)
    if mapped is not None:
        ip = mapped
    if ip in METADATA or ip.is_link_local:
        raise ToolError(f"refused: {host} resolves to {ip}, a link-local or cloud metadata address, which is never "
                        f"reached")
    if not ip.is_global and not exact:
        raise ToolError(f"refused: {host} resolves to {ip}, a loopback, private or reserved address; such "
                        f"addresses are reached only when the policy lists that host by name")


def check(ctx, url: str, tool: str, resolve: bool = True) -> Target:
    """Refuse `url` unless the policy allows it; return where to connect. Opens no socket
    except for the DNS lookup of an allowed host (none when `resolve` is false: a proxy
    resolves and checks names itself)."""
    if not isinstance(url, str) or not url.strip():
        raise ToolError("url is empty: give an http:// or https:// URL")
    url = url.strip()
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https"):
        raise ToolError(f"only http and https URLs can be fetched, not {scheme or 'a URL without a scheme'}: {url}")
    host = (parts.hostname or "").lower().rstrip(".")
    if not host:
        raise ToolError(f"the URL has no host: {url}")
    try:
        port = parts.port or (443 if scheme == "https" else 80)
    except ValueError:
        raise ToolError(f"the URL's port is not a number from 1 to 65535: {url}") from None
    if parts.username or parts.password:
        raise ToolError("URLs with a user name or password are not fetched; drop the credentials from the URL")
    if ctx.network_mode != "allowlist":
        raise ToolError(f"network access is off in this sandbox (policy network mode: none), so {tool} did not "
                        f"fetch {url}. A policy with network mode allowlist listing {host}:{port} allows it.")
    allowed, exact = _listed(ctx, host, port)
    if not allowed:
        listed = ", ".join(ctx.network_allow) or "nothing"
        raise ToolError(f"{host}:{port} is not in the policy's network allowlist ({listed}); {tool} did not "
                        f"fetch {url}")
    ips = _addresses(host, port) if resolve else _literal(host)
    for ip in ips:
        _check_ip(ip, host, exact)
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    return Target(url, scheme, host, port, path, str(ips[0]) if ips else "")


def _literal(host: str) -> list:
    try:
        return [ipaddress.ip_address(host)]
    except ValueError:
        return []


def _addresses(host: str, port: int) -> list:
    """Every address `host` resolves to (the literal itself for an IP)."""
    ips = _literal(host)
    if ips:
        return ips
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise ToolError(f"could not resolve {host}: {e.strerror or e}") from None
    ips = [ipaddress.ip_address(i[4][0].split("%")[0]) for i in infos]
    if not ips:
        raise ToolError(f"could not resolve {host}: no address")
    return ips


class _PinnedHTTP(http.client.HTTPConnection):
    def __init__(self, target: Target, timeout: float) -> None:
        super().__init__(target.host, target.port, timeout=timeout)
        self._ip = target.ip

    def connect(self) -> None:
        self.sock = socket.create_connection((self._ip, self.port), self.timeout)


class _PinnedHTTPS(http.client.HTTPSConnection):
    def __init__(self, target: Target, timeout: float) -> None:
        self._ctx = ssl.create_default_context()
        super().__init__(target.host, target.port, timeout=timeout, context=self._ctx)
        self._ip = target.ip

    def connect(self) -> None:
        sock = socket.create_connection((self._ip, self.port), self.timeout)
        self.sock = self._ctx.wrap_socket(sock, server_hostname=self.host)


def _headers(given: Optional[Dict[str, str]]) -> Dict[str, str]:
    out = {"User-Agent": USER_AGENT, "Accept": "text/html,application/json,text/plain;q=0.9,*/*;q=0.5",
           "Accept-Encoding": "identity"}
    for k, v in (given or {}).items():
        if str(k).lower() not in SAFE_HEADERS:
            raise ToolError(f"header {k!r} cannot be set: only {', '.join(SAFE_HEADERS)} are allowed")
        if "\n" in str(v) or "\r" in str(v):
            raise ToolError(f"header {k!r} contains a line break")
        out["-".join(w.capitalize() for w in str(k).split("-"))] = str(v)
    return out


class Response:
    def __init__(self, url: str, status: int, reason: str, content_type: str, body: bytes, cut: bool,
                 length: Optional[int], redirects: int) -> None:
        self.url, self.status, self.reason, self.content_type = url, status, reason, content_type
        self.body, self.cut, self.length, self.redirects = body, cut, length, redirects


def proxy_for(ctx, scheme: str) -> Optional[Tuple[str, int]]:
    """(host, port) of the egress proxy the sandbox is given (HTTP(S)_PROXY), or None."""
    names = ("https_proxy", "HTTPS_PROXY") if scheme == "https" else ("http_proxy", "HTTP_PROXY")
    for name in names:
        value = ctx.env.get(name) or os.environ.get(name)
        if value:
            parts = urlsplit(value if "://" in value else "http://" + value)
            if parts.hostname:
                return parts.hostname, parts.port or 3128
    return None


def _connection(target: Target, proxy: Optional[Tuple[str, int]], timeout: float):
    if proxy is None:
        return (_PinnedHTTPS if target.scheme == "https" else _PinnedHTTP)(target, timeout)
    if target.scheme == "https":
        conn = http.client.HTTPSConnection(proxy[0], proxy[1], timeout=timeout, context=ssl.create_default_context())
        conn.set_tunnel(target.host, target.port)
        return conn
    return http.client.HTTPConnection(proxy[0], proxy[1], timeout=timeout)


def get(ctx, url: str, tool: str, max_bytes: int, timeout: float, headers=None) -> Response:
    """GET with redirects; through the sandbox's egress proxy when one is set (it resolves and
    checks names; the allowlist is still checked here first)."""
    hdrs = _headers(headers)
    for hop in range(MAX_REDIRECTS + 1):
        proxy = proxy_for(ctx, urlsplit(url.strip()).scheme.lower()) if isinstance(url, str) else None
        target = check(ctx, url, tool, resolve=proxy is None)
        conn = _connection(target, proxy, timeout)
        request_path = target.path
        if proxy is not None and target.scheme == "http":
            request_path = f"http://{target.host}:{target.port}{target.path}"
        try:
            conn.request("GET", request_path, headers=hdrs)
            resp = conn.getresponse()
            location = resp.getheader("Location")
            if resp.status in (301, 302, 303, 307, 308) and location:
                resp.close()
                url = urljoin(url, location)
                continue
            body = resp.read(max_bytes + 1)
            length = resp.getheader("Content-Length")
            resp.close()
            return Response(url, resp.status, resp.reason or "", resp.getheader("Content-Type") or "",
                            body[:max_bytes], len(body) > max_bytes,
                            int(length) if length and length.isdigit() else None, hop)
        except ToolError:
            raise
        except socket.timeout:
            raise ToolError(f"{tool}: {url} did not answer within {timeout:g}s") from None
        except ssl.SSLError as e:
            raise ToolError(f"{tool}: TLS failed for {url}: {e.reason or e}") from None
        except (OSError, http.client.HTTPException) as e:
            raise ToolError(f"{tool}: could not fetch {url}: {getattr(e, 'strerror', None) or e}") from None
        finally:
            conn.close()
    raise ToolError(f"{tool}: more than {MAX_REDIRECTS} redirects, stopped at {url}")


def _charset(content_type: str, body: bytes) -> str:
    m = re.search(r"charset=([\w.:-]+)", content_type, re.I) or \
        re.search(rb"<meta[^>]+charset=[\"']?([\w.:-]+)", body[:4096], re.I)
    if m:
        cs = m.group(1)
        cs = cs.decode("ascii", "replace") if isinstance(cs, bytes) else cs
        try:
            "".encode(cs)
            return cs
        except LookupError:
            pass
    return "utf-8"


def body_text(resp: Response) -> Tuple[str, bool]:
    """(text to show, whether the body is text at all)."""
    ctype = resp.content_type.split(";")[0].strip().lower()
    textual = bool(_TEXTUAL.match(ctype)) or (not ctype and not fsutil.looks_binary(resp.body[:8192]))
    if not textual:
        return f"({ctype or 'binary'} content, {len(resp.body)} bytes not shown)", False
    text = resp.body.decode(_charset(resp.content_type, resp.body), "replace")
    if ctype in ("text/html", "application/xhtml+xml") or (not ctype and "<html" in text[:1000].lower()):
        text = html_to_text(text)
    return text, True


def _fetch(ctx, args, tool: str) -> Result:
    url = args.get("url")
    max_bytes = int(args.get("max_bytes") or DEFAULT_MAX_BYTES)
    timeout = float(args.get("timeout") or DEFAULT_TIMEOUT)
    resp = get(ctx, url, tool, max_bytes, timeout, args.get("headers"))
    text, _ = body_text(resp)
    size = f"{len(resp.body)} bytes"
    if resp.cut:
        size += f" (cut at max_bytes {max_bytes}" + (f" of {resp.length}" if resp.length else "") + ")"
    head = [f"url: {resp.url}" + (f" (after {resp.redirects} redirect{'s' if resp.redirects != 1 else ''} from "
                                  f"{url.strip()})" if resp.redirects else ""),
            f"status: {resp.status} {resp.reason}".rstrip(),
            f"content-type: {resp.content_type or 'unknown'}",
            f"bytes: {size}"]
    meta = {"status": resp.status, "content_type": resp.content_type, "bytes": len(resp.body),
            "truncated": resp.cut, "final_url": resp.url, "redirects": resp.redirects}
    return Result("\n".join(head) + "\n\n" + text, resp.status >= 400, meta)


def http_fetch(ctx, args) -> Result:
    return _fetch(ctx, args, "http_fetch")


def web_fetch(ctx, args) -> Result:
    return _fetch(ctx, args, "web_fetch")


def _search_url(endpoint: str, query: str) -> str:
    q = quote_plus(query)
    if "{query}" in endpoint:
        return endpoint.replace("{query}", q)
    return endpoint + ("&" if "?" in endpoint else "?") + "q=" + q


def _json_results(data) -> Optional[List[Dict[str, str]]]:
    items = data
    if isinstance(data, dict):
        items = next((data[k] for k in ("results", "items", "data", "web") if isinstance(data.get(k), list)), None)
        if items is None and isinstance(data.get("web"), dict):
            items = data["web"].get("results")
    if not isinstance(items, list):
        return None
    out = []
    for it in items:
        if not isinstance(it, dict):
            continue
        url = it.get("url") or it.get("link") or it.get("href")
        if not url:
            continue
        out.append({"title": str(it.get("title") or url), "url": str(url),
                    "snippet": str(it.get("content") or it.get("snippet") or it.get("description") or "")})
    return out


def _html_results(html: str, endpoint_host: str) -> List[Dict[str, str]]:
    out, seen = [], set()
    for m in re.finditer(r"<a\b[^>]*href=[\"'](https?://[^\"']+)[\"'][^>]*>(.*?)</a>", html, re.I | re.S):
        url = m.group(1).replace("&amp;", "&")
        title = " ".join(re.sub(r"<[^>]+>", " ", m.group(2)).split())
        if not title or url in seen or (urlsplit(url).hostname or "") == endpoint_host:
            continue
        seen.add(url)
        out.append({"title": title, "url": url, "snippet": ""})
    return out


def web_search(ctx, args) -> Result:
    query = args.get("query")
    if not isinstance(query, str) or not query.strip():
        return error("query is empty: give the words to search for")
    if not ctx.search_endpoint:
        return error("web_search has no search endpoint: the policy must name one (network.search_endpoint, "
                     "a URL such as https://searx.example/search?format=json&q={query})")
    limit = int(args.get("max_results") or 10)
    endpoint = str(ctx.search_endpoint)
    resp = get(ctx, _search_url(endpoint, query.strip()), "web_search", 1 << 20,
               float(args.get("timeout") or DEFAULT_TIMEOUT), {"accept": "application/json, text/html;q=0.8"})
    if resp.status >= 400:
        return error(f"web_search: the search endpoint answered {resp.status} {resp.reason}")
    raw = resp.body.decode(_charset(resp.content_type, resp.body), "replace")
    results = None
    try:
        results = _json_results(json.loads(raw))
    except ValueError:
        pass
    if results is None:
        results = _html_results(raw, (urlsplit(endpoint).hostname or "").lower())
    if not results:
        return ok(f"no results for {query.strip()!r}", results=0)
    lines = []
    for n, r in enumerate(results[:limit], 1):
        lines.append(f"{n}. {r['title']}\n   {r['url']}" + (f"\n   {' '.join(r['snippet'].split())[:300]}"
                                                            if r["snippet"] else ""))
    return ok("\n".join(lines), results=min(limit, len(results)))
