"""What every HTTP service of the platform refuses before its routes see a request, and how it
words a refusal. The orders API, both sandboxes and the chaos panel install it (`install`); the
control endpoints (WSGI) use the same checks (`host_allowed`, `origin_refusal`, `request_line_problem`,
`json_problem`).

- **Host**: only the loopback names, IP literals (a DNS-rebinding page always arrives under a
  name of its own) and the names in `ALLOWED_HOSTS` (comma-separated: the public host, the
  service's name in compose). Anything else is 400: a foreign name that resolves to 127.0.0.1
  reads nothing and changes nothing.
- **Request line**: a path or query that is not valid UTF-8 once percent-decoded, or that holds
  control characters (NUL included), is 400.
- **Bodies**: at most MAX_BODY_BYTES (413). A JSON body must be valid UTF-8 JSON without NaN or
  Infinity and without NUL or lone surrogates in any string (400, naming where); a form body the
  same, field by field.
- **Validation errors** (422) name each field and cut long values: a 5 MB field is not echoed.
  Each error carries FastAPI's documented `loc`, `msg` and `type`, and `field`, `message` and
  `input` besides.
- **A backing database that does not answer** is 503 naming the service, never a 500.

Every operation's OpenAPI document says so: 400, 413 (where a body may come) and 503 are
documented as a `Refusal` (`{"detail": "why"}`), and 422 as either a validation error or a
refusal (a route's own 422, such as an idempotency conflict), so that what a client reads in the
document is what it gets (schemathesis checks it, tests/integration/test_api_conformance.py).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import psycopg
from fastapi import FastAPI, Request, Response
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute
from psycopg_pool import PoolTimeout
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from effectively_once.request_checks import (
    CONTROL_CHARACTERS,
    MAX_BODY_BYTES,
    configured_hosts,
    cut,
    form_problem,
    host_allowed,
    json_problem,
    request_line_problem,
)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def _field(location: tuple[Any, ...]) -> str:
    """Where the error is, as `body.lines.0.sku`; a part named by the input (an unknown key) is cut."""
    return cut(".".join(str(part) for part in location) or "request")


def validation_errors(error: RequestValidationError) -> list[dict[str, Any]]:
    found = []
    for item in error.errors()[:20]:
        location = tuple(item.get("loc", ()))
        message = str(item.get("msg", "invalid"))[:300]
        found.append(
            {
                "loc": [part if isinstance(part, int) else cut(str(part)) for part in location],
                "msg": message,
                "type": str(item.get("type", "value_error")),
                "field": _field(location),
                "message": message,
                **({"input": cut(item["input"])} if "input" in item and item["input"] is not None else {}),
            }
        )
    return found


class FrontDoor:
    """ASGI middleware: the checks above, before the application sees the request."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]], allowed: frozenset[str]) -> None:
        self.app, self.allowed = app, allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {name.decode("latin-1").lower(): value.decode("latin-1") for name, value in scope["headers"]}
        if not host_allowed(headers.get("host"), self.allowed):
            await _refuse(
                send, 400, f"refused: the Host {cut(headers.get('host', ''))} is not one this service answers to"
            )
            return
        problem = request_line_problem(
            scope.get("raw_path") or scope["path"].encode(), scope.get("query_string", b"")
        ) or (CONTROL_CHARACTERS.search(scope["path"]) and "the path holds control characters")
        if problem:
            await _refuse(send, 400, problem)
            return
        if scope["method"] in ("POST", "PUT", "PATCH", "DELETE"):
            body, too_large = await _read_body(receive)
            if too_large:
                await _refuse(send, 413, f"the body is larger than {MAX_BODY_BYTES} bytes")
                return
            kind = headers.get("content-type", "").split(";")[0].strip().lower()
            problem = (
                json_problem(body)
                if body and (kind == "application/json" or kind.endswith("+json"))
                else form_problem(body)
                if body and kind == "application/x-www-form-urlencoded"
                else None
            )
            if problem:
                await _refuse(send, 400, problem)
                return
            receive = _replay(body)
        await self.app(scope, receive, send)


async def _read_body(receive: Receive) -> tuple[bytes, bool]:
    chunks, size = [], 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return b"", True
        chunks.append(chunk)
        if not message.get("more_body"):
            break
    return b"".join(chunks), False


def _replay(body: bytes) -> Receive:
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return receive


async def _refuse(send: Send, status: int, message: str) -> None:
    payload = json.dumps({"detail": message[:500]}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": payload})


class Refusal(BaseModel):
    """Why a request was refused: the body of every 4xx and 503 that is not a validation error."""

    detail: str


REFUSAL = {
    "title": "Refusal",
    "type": "object",
    "required": ["detail"],
    "properties": {"detail": {"type": "string", "description": "why the request was refused"}},
}
BODY_METHODS = ("post", "put", "patch", "delete")


VALIDATION_ERROR = {"$ref": "#/components/schemas/HTTPValidationError"}


def _refusal_beside(answers: dict[str, Any], status: str, description: str, also: dict[str, str] | None = None) -> None:
    """Document a Refusal under `status`, beside whatever body the route documents there (and `also`)."""
    refusal = {"$ref": "#/components/schemas/Refusal"}
    answer = answers.setdefault(status, {"description": description})
    content = answer.setdefault("content", {}).setdefault("application/json", {})
    own = content.get("schema")
    schemas = [] if own is None else own.get("anyOf", [own])
    for schema in (also, refusal):
        if schema is not None and schema not in schemas:
            schemas.append(schema)
    content["schema"] = schemas[0] if len(schemas) == 1 else {"anyOf": schemas}


def _document_refusals(app: FastAPI) -> None:
    """Add what the front door may answer to every operation of the app's OpenAPI document."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema:
            return app.openapi_schema
        document = generate()
        document.setdefault("components", {}).setdefault("schemas", {})["Refusal"] = REFUSAL
        refusal = {"application/json": {"schema": {"$ref": "#/components/schemas/Refusal"}}}
        for operations in document.get("paths", {}).values():
            for method, operation in operations.items():
                answers = operation.setdefault("responses", {})
                _refusal_beside(answers, "400", "refused by the front door (the route may refuse too)")
                if method in BODY_METHODS:
                    answers.setdefault("413", {"description": "the body is too large", "content": refusal})
                _refusal_beside(answers, "503", "a backing database does not answer")
                if "422" in answers:
                    _refusal_beside(answers, "422", "", also=VALIDATION_ERROR)
        app.openapi_schema = document
        return document

    app.openapi = openapi  # type: ignore[method-assign]


def install(app: FastAPI, service: str, allowed: frozenset[str] | None = None) -> None:
    """Put the front door before `app`; answer validation errors and a silent database as above,
    and document every answer the door may give."""
    app.add_middleware(FrontDoor, allowed=configured_hosts() if allowed is None else allowed)
    _document_refusals(app)

    @app.exception_handler(StarletteHTTPException)
    async def refused(request: Request, error: StarletteHTTPException) -> Response:
        """A 405 names every method the path has (Starlette names only the first route's)."""
        if error.status_code != 405:
            return await http_exception_handler(request, error)
        methods = sorted(
            {
                method
                for route in app.routes
                if isinstance(route, APIRoute) and route.path_regex.match(request.url.path)
                for method in route.methods or ()
            }
        )
        return JSONResponse({"detail": "Method Not Allowed"}, status_code=405, headers={"Allow": ", ".join(methods)})

    @app.exception_handler(RequestValidationError)
    async def invalid(_: Request, error: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": validation_errors(error)}, status_code=422)

    @app.exception_handler(psycopg.OperationalError)
    @app.exception_handler(PoolTimeout)
    async def database_away(_: Request, error: Exception) -> JSONResponse:
        return JSONResponse(
            {"detail": f"{service}: its database does not answer ({type(error).__name__}); try again shortly"},
            status_code=503,
            headers={"Retry-After": "5"},
        )
