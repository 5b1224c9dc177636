"""The OpenAPI document of `runner serve` (issue 50): valid against the OpenAPI schema, every
route's request and answers described by models, the Bearer scheme, the error bodies; the API
called through a client that knows nothing but the document (each request built from it, each
answer checked against it); /docs served from the installed Swagger UI, no other host."""
from __future__ import annotations

import re
from urllib.parse import urlsplit

import httpx
import jsonschema
import pytest
from openapi_spec_validator import validate

from .conftest import add_tenant

pytestmark = pytest.mark.usefixtures("no_leaks")


class DocClient:
    """Calls operations by their operationId: the method and path come from the document, the
    JSON body is checked against its requestBody schema before it is sent, and the answer must
    be one the document lists, its JSON valid against that answer's schema."""

    def __init__(self, doc: dict, url: str, key: str | None) -> None:
        self.doc = doc
        self.ops = {op["operationId"]: (method, path, op) for path, item in doc["paths"].items()
                    for method, op in item.items()}
        scheme = next(iter(doc["components"]["securitySchemes"].values()))
        assert scheme["type"] == "http" and scheme["scheme"] == "bearer"
        self.http = httpx.Client(base_url=url, timeout=120,
                                 headers={"Authorization": f"Bearer {key}"} if key else {})

    def schema(self, s: dict) -> jsonschema.Draft202012Validator:
        return jsonschema.Draft202012Validator({**s, "components": self.doc["components"]})

    def __call__(self, op_id: str, *, json=None, content: bytes | None = None, query: dict | None = None,
                 **path_params) -> httpx.Response:
        method, path, op = self.ops[op_id]
        url = re.sub(r"\{(\w+)(?::path)?\}", lambda m: str(path_params.pop(m.group(1))), path)
        assert not path_params, f"{op_id} takes no {path_params}"
        for p in op.get("parameters", []):
            if p["in"] == "query" and query and p["name"] in query:
                self.schema(p["schema"]).validate(query[p["name"]])
        if json is not None:
            self.schema(op["requestBody"]["content"]["application/json"]["schema"]).validate(json)
        elif content is not None:
            assert "application/octet-stream" in op["requestBody"]["content"]
        r = self.http.request(method.upper(), url, json=json, content=content, params=query)
        documented = op["responses"].get(str(r.status_code))
        assert documented is not None, f"{op_id} answered {r.status_code}, which its document does not list: {r.text}"
        kind = r.headers.get("content-type", "").split(";")[0]
        if r.status_code != 204:
            assert kind in documented.get("content", {}), f"{op_id} {r.status_code}: {kind} is not documented"
            if kind == "application/json":
                self.schema(documented["content"][kind]["schema"]).validate(r.json())
        return r


def test_the_document_is_valid_and_describes_every_route(start_server, data):
    server = start_server("--data", str(data))
    with server.client() as c:
        doc = c.get("/openapi.json").json()
    validate(doc)  # against the OpenAPI 3.1 schema
    schemas = doc["components"]["schemas"]
    assert {"ErrorBody", "NewSession", "CallIn", "ExecIn", "ToolResult", "SessionCreated", "ExecOut"} <= set(schemas)
    ops = [(path, method, op) for path, item in doc["paths"].items() for method, op in item.items()
           if path.startswith("/v1/")]
    assert len(ops) >= 10
    for path, method, op in ops:
        where = f"{method.upper()} {path}"
        ok = [code for code in op["responses"] if code.startswith("2")]
        assert len(ok) == 1, where
        if ok[0] != "204":
            assert op["responses"][ok[0]]["content"], where
            assert all(c.get("schema") for c in op["responses"][ok[0]]["content"].values()), where
        errors = {code: r for code, r in op["responses"].items() if code[0] in "45"}
        for code, r in errors.items():
            if (where, code) == ("GET /v1/ready", "503"):  # not ready: the same checks as when ready
                assert r["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/Ready"}
                continue
            assert r["content"]["application/json"]["schema"] == {"$ref": "#/components/schemas/ErrorBody"}, \
                (where, code)
        if path in ("/v1/health", "/v1/ready"):  # liveness and readiness: no key (ready names images to the operator only)
            assert "security" not in op
            continue
        assert op["security"] == [{"HTTPBearer": []}], where
        assert {"401", "422"} <= set(errors), where
        if method in ("post", "put") and path not in ("/v1/sessions/{sid}/files/{path}", "/v1/sessions/{sid}/pause",
                                                       "/v1/sessions/{sid}/resume"):  # (the last two take no body)
            assert op["requestBody"]["content"]["application/json"]["schema"]["$ref"].startswith(
                "#/components/schemas/"), where
    assert doc["paths"]["/v1/sessions/{sid}/files/{path}"]["put"]["requestBody"]["content"][
        "application/octet-stream"]


def test_the_api_through_a_client_driven_by_the_document(start_server, data, policy_file):
    key = add_tenant("doc", data, policy_file, "--image", "runner/base")
    server = start_server("--data", str(data))
    doc = httpx.get(f"{server.url}/openapi.json").json()
    api = DocClient(doc, server.url, key)
    nobody = DocClient(doc, server.url, None)
    assert api("health").json()["status"] == "ok"
    assert nobody("list_sessions").status_code == 401
    assert {t["name"] for t in api("tools").json()} >= {"bash", "read", "write"}
    made = api("new_session", json={"sandbox": "session"})
    assert made.status_code == 201
    sid = made.json()["id"]
    assert api("get_session", sid=sid).json()["sandbox"] == "session"
    assert [s["id"] for s in api("list_sessions").json()["sessions"]] == [sid]
    res = api("call", sid=sid, json={"tool": "bash", "args": {"command": "echo hi"}}).json()
    assert res["content"].strip() == "hi" and not res["is_error"]
    assert api("put_file", sid=sid, path="dir/a.txt", content=b"payload").status_code == 204
    assert api("get_file", sid=sid, path="dir/a.txt").content == b"payload"
    assert api("get_file", sid=sid, path="none.txt").status_code == 404
    bad = api.http.post(f"/v1/sessions/{sid}/calls", json={"tool": 3})  # past the client: the server's 422
    assert bad.status_code == 422
    api.schema(doc["paths"]["/v1/sessions/{sid}/calls"]["post"]["responses"]["422"]["content"]["application/json"][
        "schema"]).validate(bad.json())
    with pytest.raises(jsonschema.ValidationError):  # the client refuses what the document does not allow
        api("new_session", json={"sandbox": "forever"})
    ran = api("exec_", json={"image": "runner/base", "cmd": ["echo", "out"]}).json()
    assert ran["exit_code"] == 0 and ran["stdout"] == "out\n"
    assert api("exec_", json={"image": "other/img", "cmd": ["true"]}).status_code == 403
    assert api("delete_session", sid=sid).status_code == 204
    assert api("get_session", sid=sid).status_code == 410
    assert api("call", sid="snope", json={"tool": "ls"}).status_code == 404


def test_docs_come_from_the_installed_swagger_ui_and_no_other_host(start_server, data):
    import swagger_ui_bundle

    server = start_server("--data", str(data))
    with server.client() as c:
        page = c.get("/docs")
        assert page.status_code == 200 and "swagger-ui" in page.text
        refs = re.findall(r"""(?:src|href)=["']([^"']+)["']""", page.text) + re.findall(r"url: '([^']+)'", page.text)
        assert refs
        for ref in refs:
            assert not urlsplit(ref).netloc, f"/docs loads {ref} from another host"
            got = c.get(ref)
            assert got.status_code == 200 and got.content, ref
        js = c.get("/docs/assets/swagger-ui-bundle.js").content
        from pathlib import Path

        assert js == (Path(swagger_ui_bundle.swagger_ui_path) / "swagger-ui-bundle.js").read_bytes()
        assert c.get("/redoc").status_code == 404  # (it would load from a CDN)


def test_docs_render_in_headless_chromium_from_the_server_alone(start_server, data, tmp_path):
    """Swagger UI draws the document's operations in a browser that resolves no host name (its
    script and style come from the server or the page stays blank), the Bearer scheme offered."""
    from .chromium import Chromium
    from .conftest import wait_for

    server = start_server("--data", str(data))
    browser = Chromium(str(tmp_path / "profile"))
    try:
        browser.open(f"{server.url}/docs")
        text = "document.body ? document.body.innerText : ''"
        wait_for(lambda: "/v1/sessions/{sid}/calls" in browser.evaluate(text), 60, "Swagger UI drew the operations")
        shown = browser.evaluate(text)
        assert "Authorize" in shown and "/v1/exec" in shown, shown[:2000]
        shot = tmp_path / "docs.png"
        browser.screenshot(shot)
        print(f"\n/docs screenshot: {shot}")
    finally:
        browser.close()
