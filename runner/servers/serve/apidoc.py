"""What the OpenAPI document of `runner serve` says beyond the routes' signatures: the answers'
models, the error bodies by status, the request bodies (the routes parse them themselves, as
bounded JSON: runner/untrusted/boundedjson.py), the Bearer scheme; and /docs, Swagger UI served
from its files in an installed package (swagger-ui-bundle), never from another host.

A route says what it takes and answers with `doc(...)`:

    @app.post("/v1/sessions", status_code=201, **doc(NewSession, SessionCreated, 403, 429))
"""
from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ...results import ToolResult

SCHEMES = "#/components/schemas/{model}"


# -- answers ------------------------------------------------------------------------------------
class FieldError(BaseModel):
    loc: list[str | int] = Field(description="where: body, then the field's path; or path")
    msg: str
    type: str


class ErrorBody(BaseModel):
    """Every error's body: a sentence, or (422) the fields at fault."""
    detail: str | list[FieldError]


class Health(BaseModel):
    model_config = ConfigDict(extra="allow")
    status: str
    version: str
    database: str = Field(description="the database's dialect: sqlite or postgresql")


class SessionCreated(BaseModel):
    id: str
    policy: str
    sandbox: str = Field(description="session: one sandbox for the session's life; per-call: a fresh one per call")
    note: str = Field(description="what carries over between the session's calls, in a sentence")


class SessionInfo(BaseModel):
    id: str
    policy: str
    sandbox: str | None = Field(description="session or per-call; null: a session made before the choice existed")
    created: float = Field(description="seconds since the epoch")
    last_used: float
    calls: int = Field(description="calls so far (the last call's id is c<calls>)")


class SessionList(BaseModel):
    sessions: list[SessionInfo]


class ToolSpec(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str
    description: str
    guidance: str | None = None
    parameters: dict[str, Any] = Field(description="the tool's arguments as JSON Schema")
    source: str
    writes: bool
    network: bool
    needs_approval: bool


class Check(BaseModel):
    model_config = ConfigDict(extra="allow")
    ok: bool
    error: str | None = Field(default=None, description="why not, when not ok")


class Ready(BaseModel):
    status: str = Field(description="ready or not ready")
    checks: dict[str, Check] = Field(description="engine, database, images: each ok or why not")


class NetworkChange(BaseModel):
    model_config = ConfigDict(extra="forbid")
    allow: list[str] | None = Field(default=None, description="the allowlist's new entries, within the grant")


class SecretHosts(BaseModel):
    model_config = ConfigDict(extra="forbid")
    hosts: list[str]


class PolicyChange(BaseModel):
    model_config = ConfigDict(extra="forbid")
    network: NetworkChange | None = None
    secrets: dict[str, SecretHosts] | None = Field(default=None, description="a brokered secret's hosts")


class PolicyNow(BaseModel):
    model_config = ConfigDict(extra="allow")


class SnapshotMeta(BaseModel):
    model_config = ConfigDict(extra="allow")
    id: str
    name: str | None = None
    size: int | None = Field(default=None, description="bytes")
    processes: bool | None = Field(default=None, description="false: running processes were not captured")


class SnapshotList(BaseModel):
    snapshots: list[SnapshotMeta] = Field(description="each with its size in bytes and age in seconds")


class Forked(BaseModel):
    sessions: list[str] = Field(description="the new sessions' ids, their sandboxes started")


class VolumeInfo(BaseModel):
    model_config = ConfigDict(extra="allow")
    name: str


class VolumeList(BaseModel):
    volumes: list[VolumeInfo] = Field(description="each with its size and the sessions mounting it")


class FileNames(BaseModel):
    names: list[str] = Field(description="the directory's names, sorted; a directory's ends with '/'")


class ExecOut(BaseModel):
    exit_code: int = Field(description="124 on timeout, 137 when killed for memory")
    timed_out: bool
    oom_killed: bool
    stdout: str
    stderr: str
    truncated: dict[str, int] = Field(description="bytes of stdout or stderr cut past 1 MiB")


ERRORS = {
    401: "no valid API key (the answer has WWW-Authenticate: Bearer)",
    403: "a policy or image not granted to the tenant, or a protected path",
    404: "no such session for this tenant, or no such file, snapshot or volume",
    409: "not in a state to do it (a volume mounted, a session not paused or already paused)",
    410: "the session has ended",
    413: "the request body is over the limit, or a snapshot or volume over the tenant's bytes",
    422: "malformed JSON or fields, naming them",
    429: "over a quota (Retry-After says when to retry)",
    499: "the client went away; its command was stopped",
    503: "the server is shutting down (Retry-After)",
}
SESSION = (404, 410)  # a route under /v1/sessions/{sid}


def body_of(model: type[BaseModel]) -> dict:
    required = any(f.is_required() for f in model.model_fields.values())  # else an empty body is {}
    return {"requestBody": {"required": required, "content": {"application/json": {
        "schema": {"$ref": SCHEMES.format(model=model.__name__)}}}}}


def doc(body: type[BaseModel] | None, answer: Any, *errors: int, secured: bool = True, **extra) -> dict:
    """The keyword arguments of a route: its request body's model (None: none), its answer (a
    model, or a `responses` entry of its own), its error statuses (401 and 422 on every secured
    route besides)."""
    codes = sorted({*errors, *((401, 422) if secured else ())})
    responses: dict = {code: {"model": ErrorBody, "description": ERRORS[code]} for code in codes}
    status = extra.pop("status", 200)
    responses.update(extra.pop("responses_extra", {}))  # an error status whose body is not ErrorBody
    responses[status] = answer if isinstance(answer, dict) else {"model": answer}
    out = {"responses": responses, **extra}
    if body is not None:
        out["openapi_extra"] = body_of(body)
        REQUEST_MODELS.append(body)
    return out


REQUEST_MODELS: list[type[BaseModel]] = []  # their schemas go into the document's components


def components(schema: dict) -> dict:
    """The document with the request bodies' schemas among its components."""
    from pydantic.json_schema import models_json_schema

    models = list(dict.fromkeys(REQUEST_MODELS))
    if models:
        _, defs = models_json_schema([(m, "validation") for m in models], ref_template=SCHEMES)
        schema.setdefault("components", {}).setdefault("schemas", {}).update(defs.get("$defs", {}))
    for item in schema.get("paths", {}).values():  # an answer of another kind (a file's bytes) is not
        for op in item.values():                   # also JSON of any shape, as FastAPI's default says
            for answer in op.get("responses", {}).values():
                content = answer.get("content", {})
                if len(content) > 1 and content.get("application/json") == {"schema": {}}:
                    del content["application/json"]
    return schema


def install(app) -> None:
    """The document's request bodies, and /docs served from the installed swagger-ui-bundle."""
    from fastapi.openapi.docs import get_swagger_ui_html
    from fastapi.responses import HTMLResponse
    from fastapi.staticfiles import StaticFiles

    openapi = app.openapi

    def document() -> dict:
        if app.openapi_schema is None:
            app.openapi_schema = components(openapi())
        return app.openapi_schema
    app.openapi = document

    try:
        from swagger_ui_bundle import swagger_ui_path
    except ImportError:  # the document is still served at /openapi.json
        return
    app.mount("/docs/assets", StaticFiles(directory=swagger_ui_path), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url="/openapi.json", title="runner serve: API",
                                   swagger_js_url="/docs/assets/swagger-ui-bundle.js",
                                   swagger_css_url="/docs/assets/swagger-ui.css",
                                   swagger_favicon_url="/docs/assets/favicon-32x32.png")


__all__ = ["ErrorBody", "ExecOut", "Health", "SessionCreated", "SessionInfo", "SessionList", "ToolResult", "ToolSpec",
           "SESSION", "doc", "install"]
