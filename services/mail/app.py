"""The mail sandbox's HTTP API and inbox page.

POST /v1/messages   (Idempotency-Key required)  202: accepted (a repeat is counted, not stored twice)
GET  /v1/messages?order_id=...                   what arrived
GET  /                                           the inbox page
GET/PUT/DELETE /admin/faults                     a failure rate for the next requests
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.templating import Jinja2Templates
from prometheus_client import Counter, make_asgi_app
from psycopg.rows import dict_row
from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel, ConfigDict, Field

from effectively_once.connection_pools import serving_async_pool
from services import http_front_door, sandbox_admin
from services.saga_fields import (
    MAX_KEY_LENGTH,
    SINGLE_LINE,
    EmailAddress,
    MessageBody,
    OrderId,
    Subject,
    idempotency_key_problem,
    idempotency_key_schema,
)

TEMPLATES = Jinja2Templates(directory=Path(__file__).parent / "templates")
MESSAGES = Counter("eo_mail_requests", "Send requests, by what became of them.", ["result"])
for _result in ("accepted", "deduplicated", "failed", "refused", "bad_request"):
    MESSAGES.labels(_result)  # every series at zero from the start


class MessageIn(BaseModel):
    """A message, with the limits the orders API uses too (services/saga_fields.py): every
    address the API accepted is one this sandbox takes."""

    model_config = ConfigDict(strict=True, extra="forbid")

    recipient: EmailAddress
    subject: Subject
    body: MessageBody
    order_id: OrderId | None = None


class Accepted(BaseModel):
    accepted: bool
    duplicate: bool
    """True when this key's message was accepted before: nothing new is sent."""


class MailError(BaseModel):
    error: str


IDEMPOTENCY_KEY_SCHEMA = idempotency_key_schema("required; one message per key, however often it comes")
SEND_ANSWERS: dict[int | str, dict[str, Any]] = {
    202: {"description": "accepted, or this key's message accepted before (`duplicate`)", "model": Accepted},
    400: {"description": "no usable Idempotency-Key", "model": MailError},
    422: {"description": "the recipient is refused for good (injected)", "model": MailError},
    503: {"description": "the sandbox failed (injected): try again", "model": MailError},
}


class MailFaults(BaseModel):
    """What the next requests meet; rates are probabilities in [0, 1], as JSON numbers."""

    model_config = ConfigDict(extra="forbid", strict=True)

    failure_rate: float = Field(default=0.0, ge=0, le=1, description="answer 503 without accepting (transient)")
    refusal_rate: float = Field(
        default=0.0, ge=0, le=1, description="refuse the recipient with 422 (a permanent refusal), storing nothing"
    )


def create_app(database_url: str, admin_password: str = sandbox_admin.DEVELOPMENT_DEFAULT) -> FastAPI:
    # The connections a failover dropped are replaced, not used.
    pool = serving_async_pool(database_url, min_size=1, max_size=5, kwargs={"connect_timeout": 5, "autocommit": True})
    faults = {"current": MailFaults()}

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await pool.open(wait=False)
        yield
        await pool.close()

    app = FastAPI(title="mail sandbox", version="0.1.0", lifespan=lifespan)
    app.mount("/metrics", make_asgi_app())
    http_front_door.install(app, "the mail sandbox")

    @app.get("/healthz", tags=["health"])
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/messages", status_code=202, tags=["messages"], responses=SEND_ANSWERS)
    async def send(
        message: MessageIn,
        idempotency_key: Annotated[
            str | None, Header(max_length=MAX_KEY_LENGTH * 4, json_schema_extra=IDEMPOTENCY_KEY_SCHEMA)
        ] = None,
    ) -> JSONResponse:
        """Accept a message once per idempotency key; a repeat is acknowledged and counted. A
        missing, empty or blank key is refused (400)."""
        problem = "an Idempotency-Key header is required" if idempotency_key is None else None
        problem = problem or idempotency_key_problem(idempotency_key)
        if problem or idempotency_key is None:
            MESSAGES.labels("bad_request").inc()
            return JSONResponse({"error": problem}, status_code=400)
        if random.random() < faults["current"].failure_rate:
            MESSAGES.labels("failed").inc()
            return JSONResponse({"error": "the mail sandbox failed (injected)"}, status_code=503)
        if random.random() < faults["current"].refusal_rate:
            MESSAGES.labels("refused").inc()
            return JSONResponse({"error": "the recipient is refused (injected)"}, status_code=422)
        async with pool.connection() as connection:
            cursor = await connection.execute(
                """INSERT INTO mail_message (idempotency_key, recipient, subject, body, order_id)
                   VALUES (%s, %s, %s, %s, %s)
                   ON CONFLICT (idempotency_key) DO UPDATE SET deliveries = mail_message.deliveries + 1
                   RETURNING deliveries""",
                (idempotency_key, message.recipient, message.subject, message.body, message.order_id),
            )
            row = await cursor.fetchone()
        deliveries = row[0] if row else 1
        MESSAGES.labels("accepted" if deliveries == 1 else "deduplicated").inc()
        return JSONResponse({"accepted": True, "duplicate": deliveries > 1}, status_code=202)

    @app.get("/v1/messages", tags=["messages"])
    async def messages(
        order_id: Annotated[str | None, Query(max_length=255, pattern=SINGLE_LINE)] = None,
    ) -> list[dict[str, Any]]:
        return await _messages(pool, order_id, 10_000)

    @app.get("/", response_class=HTMLResponse, tags=["pages"])
    async def inbox(request: Request) -> Any:
        """The inbox: every message accepted, newest first, with how often it was sent."""
        return TEMPLATES.TemplateResponse(request, "inbox.html", {"messages": await _messages(pool, None, 200)})

    admin = [Depends(sandbox_admin.admin_only(admin_password))]

    @app.get("/admin/faults", tags=["faults"], dependencies=admin, responses=sandbox_admin.REFUSED)
    async def get_faults() -> MailFaults:
        return faults["current"]

    @app.put("/admin/faults", tags=["faults"], dependencies=admin, responses=sandbox_admin.REFUSED)
    async def set_faults(new: MailFaults) -> MailFaults:
        faults["current"] = new
        return new

    @app.delete("/admin/faults", tags=["faults"], dependencies=admin, responses=sandbox_admin.REFUSED)
    async def reset_faults() -> MailFaults:
        faults["current"] = MailFaults()
        return faults["current"]

    return app


async def _messages(pool: AsyncConnectionPool, order_id: str | None, limit: int) -> list[dict[str, Any]]:
    async with pool.connection() as connection:
        cursor = await connection.cursor(row_factory=dict_row).execute(
            """SELECT idempotency_key, recipient, subject, order_id, deliveries, received_at FROM mail_message
                WHERE %(order)s::text IS NULL OR order_id = %(order)s ORDER BY received_at DESC LIMIT %(limit)s""",
            {"order": order_id, "limit": limit},
        )
        rows = await cursor.fetchall()
    return [row | {"received_at": row["received_at"].isoformat()} for row in rows]
