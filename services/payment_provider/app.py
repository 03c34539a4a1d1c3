"""The provider sandbox's HTTP API.

  POST /v1/charges   (Idempotency-Key required)  charge a payment method
  GET  /v1/charges?order_id=...                   the ledger
  GET/PUT/DELETE /admin/faults                    what the next requests meet
  GET  /healthz

Idempotency, as Stripe has it: the first request with a key is processed and its response
stored; a later request with the same key and the same body gets that stored response again
(errors included); the same key with a different body is an idempotency error (422); the same
key while the first request is still being processed is 409. Keys are kept 24 hours.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any, Literal

from fastapi import Depends, FastAPI, Header, Query
from fastapi.responses import JSONResponse
from prometheus_client import Counter, make_asgi_app
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool
from pydantic import BaseModel, ConfigDict

from effectively_once.connection_pools import serving_async_pool
from services import http_front_door, sandbox_admin
from services.payment_provider.faults import FaultState, ProviderFaults
from services.saga_contract import PAYMENT_METHOD_DECLINED, PROVIDER_KEY_LIFETIME
from services.saga_fields import (
    MAX_KEY_LENGTH,
    SINGLE_LINE,
    AmountCents,
    OrderId,
    PaymentMethodId,
    idempotency_key_problem,
    idempotency_key_schema,
)

REQUESTS = Counter("eo_provider_requests", "Charge requests, by what became of them.", ["result"])
for _result in (
    "charged",
    "declined",
    "replayed",
    "idempotency_error",
    "in_flight_conflict",
    "error_500",
    "timeout_after_charge",
    "refused",
    "bad_request",
):
    REQUESTS.labels(_result)  # every series at zero from the start: `replayed` is the idempotent replays
ABANDONED_AFTER_SECONDS = 60
"""An in-flight key older than this was abandoned by a crashed request: it may be taken again."""


class ErrorDetail(BaseModel):
    type: str
    message: str
    code: str | None = None


class ProviderError(BaseModel):
    """The provider's refusals, as Stripe words them: `{"error": {"type", "message", "code"?}}`."""

    error: ErrorDetail


class Charge(BaseModel):
    id: str
    object: Literal["charge"]
    amount: int
    order_id: str
    status: Literal["succeeded"]


IDEMPOTENCY_KEY_SCHEMA = idempotency_key_schema("required; one charge per key, however often it comes")
CHARGE_ANSWERS: dict[int | str, dict[str, Any]] = {
    200: {"description": "charged (or this key's stored answer, replayed)", "model": Charge},
    400: {"description": "no usable Idempotency-Key, or a refusal for good (injected)", "model": ProviderError},
    402: {"description": "the card was declined", "model": ProviderError},
    409: {"description": "a request with this key is still being processed", "model": ProviderError},
    422: {"description": "this key was used with another body", "model": ProviderError},
    500: {"description": "the sandbox failed (injected); nothing was done", "model": ProviderError},
}


class ChargeIn(BaseModel):
    """A charge, with the limits the orders API uses too (services/saga_fields.py)."""

    model_config = ConfigDict(strict=True, extra="forbid")

    order_id: OrderId
    amount_cents: AmountCents
    payment_method: PaymentMethodId


def create_app(database_url: str, admin_password: str = sandbox_admin.DEVELOPMENT_DEFAULT) -> FastAPI:
    # The connections a failover dropped are replaced, not used.
    pool = serving_async_pool(database_url, min_size=1, max_size=10, kwargs={"connect_timeout": 5, "autocommit": True})
    state = FaultState(ProviderFaults())

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        await pool.open(wait=False)
        purger = asyncio.create_task(_purge_expired_keys(pool))
        yield
        purger.cancel()
        await pool.close()

    app = FastAPI(title="payment-provider sandbox", version="0.1.0", lifespan=lifespan)
    app.mount("/metrics", make_asgi_app())
    http_front_door.install(app, "the payment-provider sandbox")

    @app.get("/healthz", tags=["health"])
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/charges", tags=["charges"], responses=CHARGE_ANSWERS)
    async def create_charge(
        charge: ChargeIn,
        idempotency_key: Annotated[
            str | None, Header(max_length=MAX_KEY_LENGTH * 4, json_schema_extra=IDEMPOTENCY_KEY_SCHEMA)
        ] = None,
    ) -> JSONResponse:
        """Charge once per Idempotency-Key, however often the request comes. A missing, empty or
        blank key is refused (400) and nothing is stored."""
        problem = "an Idempotency-Key header is required" if idempotency_key is None else None
        problem = problem or idempotency_key_problem(idempotency_key)
        if problem or idempotency_key is None:
            REQUESTS.labels("bad_request").inc()
            return _error(400, "invalid_request_error", problem or "")
        taken: list[str] = []
        try:
            return await _charge(charge, idempotency_key, taken)
        except BaseException:
            # Whatever failed after this request took the key, the key is let go: a retry is
            # processed afresh instead of meeting "in progress" for a minute.
            if taken:
                await _let_go(idempotency_key)
            raise

    async def _let_go(key: str) -> None:
        try:
            async with pool.connection() as connection:
                await connection.execute("DELETE FROM idempotency_key WHERE key = %s AND state = 'in_flight'", (key,))
        except Exception:  # the database is away: the key is taken again after ABANDONED_AFTER_SECONDS
            return

    async def _charge(charge: ChargeIn, idempotency_key: str, taken: list[str]) -> JSONResponse:
        fingerprint = hashlib.sha256(json.dumps(charge.model_dump(), sort_keys=True).encode()).hexdigest()
        async with pool.connection() as connection:
            taken_now = await (
                await connection.execute(
                    """INSERT INTO idempotency_key (key, request_hash, state) VALUES (%s, %s, 'in_flight')
                   ON CONFLICT (key) DO UPDATE SET request_hash = EXCLUDED.request_hash, created_at = now()
                   WHERE idempotency_key.state = 'in_flight'
                     AND idempotency_key.created_at < now() - make_interval(secs => %s)
                   RETURNING key""",
                    (idempotency_key, fingerprint, ABANDONED_AFTER_SECONDS),
                )
            ).fetchone()
            if taken_now is None:
                row = await (
                    await connection.execute(
                        "SELECT request_hash, state, response_status, response_body"
                        " FROM idempotency_key WHERE key = %s",
                        (idempotency_key,),
                    )
                ).fetchone()
                assert row is not None
                if row[0] != fingerprint:
                    REQUESTS.labels("idempotency_error").inc()
                    return _error(
                        422,
                        "idempotency_error",
                        "this Idempotency-Key was used with a different request body",
                    )
                if row[1] == "in_flight":
                    REQUESTS.labels("in_flight_conflict").inc()
                    return _error(
                        409,
                        "request_in_progress",
                        "a request with this Idempotency-Key is still being processed",
                    )
                REQUESTS.labels("replayed").inc()
                return JSONResponse(row[3], status_code=row[2], headers={"Idempotent-Replayed": "true"})
            taken.append(idempotency_key)

            if state.faults.latency_ms:
                await asyncio.sleep(state.faults.latency_ms / 1000)
            if state.roll(state.faults.error_rate):
                # Nothing was done: the key is let go, so a retry is processed afresh.
                await connection.execute("DELETE FROM idempotency_key WHERE key = %s", (idempotency_key,))
                REQUESTS.labels("error_500").inc()
                return _error(500, "api_error", "the provider sandbox failed (injected)")
            if state.roll(state.faults.refusal_rate):
                # A refusal for good (Stripe answers 400 invalid_request_error): nothing is stored.
                await connection.execute("DELETE FROM idempotency_key WHERE key = %s", (idempotency_key,))
                REQUESTS.labels("refused").inc()
                return _error(400, "invalid_request_error", "this charge is refused (injected refusal)")

            declined = charge.payment_method == PAYMENT_METHOD_DECLINED or state.roll(state.faults.decline_rate)
            charge_id = None if declined else f"ch_{uuid.uuid4().hex[:24]}"
            status, body = (
                (
                    402,
                    {
                        "error": {
                            "type": "card_error",
                            "code": "card_declined",
                            "message": "Your card was declined.",
                        }
                    },
                )
                if declined
                else (
                    200,
                    {
                        "id": charge_id,
                        "object": "charge",
                        "amount": charge.amount_cents,
                        "order_id": charge.order_id,
                        "status": "succeeded",
                    },
                )
            )
            async with connection.transaction():
                if charge_id:
                    await connection.execute(
                        "INSERT INTO charge (charge_id, idempotency_key, order_id, amount_cents)"
                        " VALUES (%s, %s, %s, %s)",
                        (charge_id, idempotency_key, charge.order_id, charge.amount_cents),
                    )
                await connection.execute(
                    """UPDATE idempotency_key SET state = 'done', response_status = %s, response_body = %s,
                                                  completed_at = now() WHERE key = %s""",
                    (status, Jsonb(body), idempotency_key),
                )
        REQUESTS.labels("declined" if declined else "charged").inc()
        if charge_id and state.take_timeout_after_charge():
            REQUESTS.labels("timeout_after_charge").inc()
            await asyncio.sleep(state.faults.timeout_seconds)  # charged; the caller gives up waiting
        return JSONResponse(body, status_code=status)

    @app.get("/v1/charges", tags=["charges"])
    async def list_charges(
        order_id: Annotated[str | None, Query(max_length=255, pattern=SINGLE_LINE)] = None,
    ) -> list[dict[str, Any]]:
        """The ledger, or one order's charges."""
        async with pool.connection() as connection:
            cursor = await connection.cursor(row_factory=dict_row).execute(
                """SELECT charge_id, idempotency_key, order_id, amount_cents, created_at FROM charge
                    WHERE %(order)s::text IS NULL OR order_id = %(order)s ORDER BY created_at""",
                {"order": order_id},
            )
            rows = await cursor.fetchall()
        return [row | {"created_at": row["created_at"].isoformat()} for row in rows]

    admin = [Depends(sandbox_admin.admin_only(admin_password))]

    @app.get("/admin/faults", tags=["faults"], dependencies=admin, responses=sandbox_admin.REFUSED)
    async def get_faults() -> ProviderFaults:
        return state.faults

    @app.put("/admin/faults", tags=["faults"], dependencies=admin, responses=sandbox_admin.REFUSED)
    async def set_faults(faults: ProviderFaults) -> ProviderFaults:
        """Replace the injected faults."""
        state.faults = faults
        return state.faults

    @app.delete("/admin/faults", tags=["faults"], dependencies=admin, responses=sandbox_admin.REFUSED)
    async def reset_faults() -> ProviderFaults:
        state.faults = ProviderFaults()
        return state.faults

    return app


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"type": code, "message": message}}, status_code=status)


async def _purge_expired_keys(pool: AsyncConnectionPool) -> None:
    """Keys are kept PROVIDER_KEY_LIFETIME (24 hours); a charge keeps its key for the ledger's sake."""
    while True:
        await asyncio.sleep(600)
        try:
            async with pool.connection() as connection:
                await connection.execute(
                    """DELETE FROM idempotency_key k WHERE created_at < now() - %s
                        AND NOT EXISTS (SELECT 1 FROM charge c WHERE c.idempotency_key = k.key)""",
                    (PROVIDER_KEY_LIFETIME,),
                )
        except Exception:  # the next round tries again
            continue
