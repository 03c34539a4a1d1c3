"""The order API: place an order (its OrderPlaced committed with it), read one, list them."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal

from fastapi import FastAPI, Header, HTTPException, Path, Query, Response
from prometheus_client import Counter, make_asgi_app
from psycopg.rows import dict_row
from pydantic import BaseModel, ConfigDict, Field, JsonValue, field_validator

from effectively_once.connection_pools import serving_pool
from effectively_once.envelope import Envelope
from effectively_once.outbox import add_to_outbox
from services import http_front_door
from services import saga_contract as contract
from services.saga_fields import (
    MAX_KEY_LENGTH,
    MAX_LINES,
    EmailAddress,
    Quantity,
    Sku,
    idempotency_key_problem,
    idempotency_key_schema,
)

IDEMPOTENCY_KEY_SCHEMA = idempotency_key_schema("the same key with the same body returns the same order")
ORDERS_PLACED = Counter("eo_orders_placed", "Orders accepted by the API.", ["outcome"])
for _outcome in ("placed", "replayed", "idempotency_conflict"):
    ORDERS_PLACED.labels(_outcome)  # every series at zero from the start


CATALOG_SKUS: list[JsonValue] = list(sorted(contract.CATALOG))
NO_CONTROL_CHARACTERS: dict[str, JsonValue] = {"pattern": r"^[^\x00-\x1f\x7f]*$"}
"""What every path and query must be (the front door refuses control characters with 400)."""


class OrderLineIn(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")

    sku: Sku = Field(description="A SKU from the catalog", json_schema_extra={"enum": CATALOG_SKUS})
    quantity: Quantity

    @field_validator("sku")
    @classmethod
    def _known_sku(cls, sku: str) -> str:
        if sku not in contract.CATALOG:
            raise ValueError(f"unknown SKU {sku!r}; the catalog has {', '.join(sorted(contract.CATALOG))}")
        return sku


class OrderIn(BaseModel):
    """An order. Every limit here comes from services/saga_fields.py, which the services
    downstream (and the sandboxes) use too: what is accepted here is accepted there."""

    model_config = ConfigDict(strict=True, extra="forbid")

    customer_email: EmailAddress
    lines: list[OrderLineIn] = Field(min_length=1, max_length=MAX_LINES)
    payment_method: Literal["pm_card_visa", "pm_card_declined"] = Field(
        description="pm_card_visa is authorised; pm_card_declined is declined by the provider sandbox"
    )

    @field_validator("lines")
    @classmethod
    def _one_line_per_sku(cls, lines: list[OrderLineIn]) -> list[OrderLineIn]:
        skus = [line.sku for line in lines]
        if len(set(skus)) != len(skus):
            raise ValueError("each SKU may appear on one line only; add up the quantities instead")
        return lines


class OrderLineOut(BaseModel):
    sku: str
    quantity: int
    unit_price_cents: int


class HistoryEntry(BaseModel):
    event_type: str
    message_id: str
    status_after: str
    recorded_at: str


class OrderOut(BaseModel):
    order_id: str
    status: str
    customer_email: str
    payment_method: str
    amount_cents: int
    created_at: str
    lines: list[OrderLineOut] = []
    history: list[HistoryEntry] = []


NOT_FOUND: dict[int | str, dict[str, Any]] = {404: {"description": "no such order", "model": http_front_door.Refusal}}
REPLAYED: dict[int | str, dict[str, Any]] = {
    200: {"description": "the same Idempotency-Key and body again: the order placed the first time", "model": OrderOut}
}


def request_hash(order: OrderIn) -> str:
    return hashlib.sha256(json.dumps(order.model_dump(), sort_keys=True).encode()).hexdigest()


def create_app(database_url: str) -> FastAPI:
    """The API on a pool of connections to the orders database (opened at start-up)."""
    # Each connection is checked as it is taken: the connections the server dropped (a failover, a
    # restart) are replaced before a request uses one, instead of failing that request with a 503.
    pool = serving_pool(database_url, min_size=1, max_size=8, kwargs={"connect_timeout": 5})

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        pool.open(wait=False)
        yield
        pool.close()

    app = FastAPI(
        title="effectively-once orders",
        version="0.1.0",
        lifespan=lifespan,
        description="Place orders; each one starts a saga across inventory, payment and notification.",
    )
    app.mount("/metrics", make_asgi_app())
    http_front_door.install(app, "the orders API")

    @app.get("/healthz", tags=["health"])
    def healthz() -> dict[str, str]:
        """Liveness: the process answers."""
        return {"status": "ok"}

    @app.post("/orders", response_model=OrderOut, status_code=201, tags=["orders"], responses=REPLAYED)
    def place_order(
        order: OrderIn,
        response: Response,
        idempotency_key: Annotated[str | None, Header(json_schema_extra=IDEMPOTENCY_KEY_SCHEMA)] = None,
    ) -> OrderOut:
        """Place an order. The same Idempotency-Key with the same body returns the same order; an
        empty or blank key is refused (400), since it would be one key for every client."""
        problem = idempotency_key_problem(idempotency_key)
        if problem:
            raise HTTPException(400, problem)
        fingerprint = request_hash(order)
        order_id = str(uuid.uuid4())
        amount = sum(contract.CATALOG[line.sku].price_cents * line.quantity for line in order.lines)
        with pool.connection() as connection, connection.transaction():
            inserted = connection.execute(
                """INSERT INTO customer_order (order_id, idempotency_key, request_hash, customer_email,
                                               payment_method, amount_cents, status)
                   VALUES (%s, %s, %s, %s, %s, %s, 'PLACED')
                   ON CONFLICT (idempotency_key) DO NOTHING RETURNING created_at""",
                (order_id, idempotency_key, fingerprint, order.customer_email, order.payment_method, amount),
            ).fetchone()
            if inserted is None:
                existing = connection.execute(
                    "SELECT order_id, request_hash FROM customer_order WHERE idempotency_key = %s",
                    (idempotency_key,),
                ).fetchone()
                assert existing is not None
                if existing[1] != fingerprint:
                    ORDERS_PLACED.labels("idempotency_conflict").inc()
                    raise HTTPException(422, "this Idempotency-Key was used with a different request body")
                ORDERS_PLACED.labels("replayed").inc()
                response.status_code = 200
                return _read(connection, existing[0])
            with connection.cursor() as cursor:
                cursor.executemany(
                    "INSERT INTO order_line (order_id, sku, quantity, unit_price_cents) VALUES (%s, %s, %s, %s)",
                    [
                        (order_id, line.sku, line.quantity, contract.CATALOG[line.sku].price_cents)
                        for line in order.lines
                    ],
                )
            placed = Envelope.new(
                contract.ORDER_PLACED,
                order_id,
                {
                    "order_id": order_id,
                    "customer_email": order.customer_email,
                    "payment_method": order.payment_method,
                    "amount_cents": amount,
                    "lines": [{"sku": line.sku, "quantity": line.quantity} for line in order.lines],
                },
            )
            add_to_outbox(connection, placed, contract.TOPIC_OF[contract.ORDER_PLACED])
            ORDERS_PLACED.labels("placed").inc()
            # What was just written, as GET /orders/{id} reads it (lines by SKU; no history yet): not
            # read back, which took three more statements per order.
            return OrderOut(
                order_id=order_id,
                status="PLACED",
                customer_email=order.customer_email,
                payment_method=order.payment_method,
                amount_cents=amount,
                created_at=inserted[0].isoformat(),
                lines=[
                    OrderLineOut(
                        sku=line.sku, quantity=line.quantity, unit_price_cents=contract.CATALOG[line.sku].price_cents
                    )
                    for line in sorted(order.lines, key=lambda line: line.sku)
                ],
            )

    @app.get("/orders/{order_id}", response_model=OrderOut, tags=["orders"], responses=NOT_FOUND)
    def get_order(
        order_id: Annotated[
            str, Path(min_length=1, max_length=MAX_KEY_LENGTH, json_schema_extra=NO_CONTROL_CHARACTERS)
        ],
    ) -> OrderOut:
        """One order with its lines and the saga events it saw, in order."""
        with pool.connection() as connection:
            return _read(connection, order_id)

    @app.get("/orders", response_model=list[OrderOut], tags=["orders"])
    def list_orders(limit: Annotated[int, Query(ge=1, le=500)] = 50) -> list[OrderOut]:
        """The most recent orders, newest first (without lines and history)."""
        with pool.connection() as connection:
            rows = connection.execute(
                """SELECT order_id, status, customer_email, payment_method, amount_cents, created_at
                     FROM customer_order ORDER BY created_at DESC LIMIT %s""",
                (limit,),
            ).fetchall()
        return [
            OrderOut(
                order_id=r[0],
                status=r[1],
                customer_email=r[2],
                payment_method=r[3],
                amount_cents=r[4],
                created_at=r[5].isoformat(),
            )
            for r in rows
        ]

    return app


def _read(connection: Any, order_id: str) -> OrderOut:
    reading = connection.cursor(row_factory=dict_row)
    row = reading.execute(
        """SELECT order_id, status, customer_email, payment_method, amount_cents, created_at
             FROM customer_order WHERE order_id = %s""",
        (order_id,),
    ).fetchone()
    if row is None:
        raise HTTPException(404, f"no order {order_id}")
    lines = reading.execute(
        "SELECT sku, quantity, unit_price_cents FROM order_line WHERE order_id = %s ORDER BY sku", (order_id,)
    ).fetchall()
    history = reading.execute(
        """SELECT event_type, message_id, status_after, recorded_at FROM order_history
            WHERE order_id = %s ORDER BY recorded_at""",
        (order_id,),
    ).fetchall()
    return OrderOut(
        **(row | {"created_at": row["created_at"].isoformat()}),
        lines=[OrderLineOut(**line) for line in lines],
        history=[HistoryEntry(**(entry | {"recorded_at": entry["recorded_at"].isoformat()})) for entry in history],
    )
