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
- **A backing database that does not answer** is 503 naming the service, never a 500.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import psycopg
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from psycopg_pool import PoolTimeout

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


def validation_errors(error: RequestValidationError) -> list[dict[str, str]]:
    return [
        {
            "field": _field(tuple(item.get("loc", ()))),
            "message": str(item.get("msg", "invalid"))[:300],
            **({"input": cut(item["input"])} if "input" in item and item["input"] is not None else {}),
        }
        for item in error.errors()[:20]
    ]


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


def install(app: FastAPI, service: str, allowed: frozenset[str] | None = None) -> None:
    """Put the front door before `app`; answer validation errors and a silent database as above."""
    app.add_middleware(FrontDoor, allowed=configured_hosts() if allowed is None else allowed)

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
