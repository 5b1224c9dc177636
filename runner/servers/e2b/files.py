"""envd's plain HTTP routes: GET /health, GET /files (a download) and POST /files (an upload,
multipart or octet-stream), done by the sandbox's in-sandbox process as its user."""
from __future__ import annotations

import asyncio
import base64

from . import sandbox as X

MAX_FILE = 64 * 1024 * 1024  # bytes of one file read or written through /files
CODES = {"not_found": 404, "exists": 409, "permission": 403, "invalid": 400, "too_large": 413, "gone": 502}


async def files_endpoint(e2b, sbx: X.Sandbox, path: str, scope, receive, send):
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response

    from .envd_services import path_of, user_of

    def err(code: int, message: str):
        return JSONResponse({"code": code, "message": message}, status_code=code)

    request = Request(scope, receive)
    if path == "/health":
        return await Response(status_code=204)(scope, receive, send)
    if path != "/files":
        return await err(404, f"no route {path[:100]}")(scope, receive, send)
    user = request.query_params.get("username") or user_of(request.headers)
    if user not in ("user", "1000"):
        return await err(403, f"user {user[:40]!r}: runner runs an E2B sandbox's file operations as its user `user` "
                               "only; root is not granted")(scope, receive, send)

    async def ask(op, **kw):
        return await asyncio.wrap_future(sbx.inbox.ask(op, **kw))

    try:
        if request.method == "GET":
            target = request.query_params.get("path")
            if not target:
                return await err(400, "path is required")(scope, receive, send)
            res = await ask("read", path=path_of(target), max=MAX_FILE)
            return await Response(base64.b64decode(res["b64"]), media_type="application/octet-stream")(scope, receive, send)
        if request.method == "POST":
            written = []
            meta = {k[len("x-metadata-"):]: v for k, v in request.headers.items() if k.startswith("x-metadata-")}
            if any(not k or not v.isprintable() or not v.isascii() for k, v in meta.items()):
                return await err(400, "metadata keys and values are printable ASCII")(scope, receive, send)
            ctype = request.headers.get("content-type", "")
            if ctype.startswith("multipart/form-data"):
                form = await request.form(max_files=1000, max_part_size=MAX_FILE)
                for _, f in form.multi_items():
                    name = getattr(f, "filename", None)
                    data = await f.read() if hasattr(f, "read") else str(f).encode()
                    target = request.query_params.get("path") or name
                    if not target:
                        return await err(400, "a file's path is required")(scope, receive, send)
                    written.append((target, data))
            else:
                target = request.query_params.get("path")
                if not target:
                    return await err(400, "path is required")(scope, receive, send)
                data = await request.body()
                if request.headers.get("content-encoding") == "gzip":
                    try:
                        data = inflated(data, MAX_FILE)
                    except ValueError as e:
                        return await err(400, str(e))(scope, receive, send)
                written.append((target, data))
            out = []
            for target, data in written:
                if len(data) > MAX_FILE:
                    return await err(413, f"a file over {MAX_FILE} bytes")(scope, receive, send)
                res = await ask("write", path=path_of(target), b64=base64.b64encode(data).decode(), metadata=meta)
                e = res["entry"]
                out.append({"name": e["name"], "type": "file", "path": e["path"], **({"metadata": e["metadata"]}
                                                                                   if e.get("metadata") else {})})
                sbx.audit("files.write", {"path": target, "bytes": len(data)})
            return await JSONResponse(out)(scope, receive, send)
        return await err(405, "method not allowed")(scope, receive, send)
    except X.InboxError as e:
        return await err(CODES.get(e.kind, 500), str(e))(scope, receive, send)


def inflated(data: bytes, cap: int) -> bytes:
    """A gzip body inflated to at most cap + 1 bytes (past cap it is refused as too big): a small
    body must not become gigabytes in the server's memory. ValueError when it is not gzip."""
    import zlib

    try:
        return zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(data, cap + 1)
    except zlib.error:
        raise ValueError("the body is not gzip") from None
