"""A pool of connections built here answers again soon after its database comes back, however long
it was away, and at once after the server dropped every connection it held
(effectively_once.connection_pools). Without either, the orders API answered 503 once a failover
was over: psycopg_pool's doubling backoff kept a pool waiting 8 to 16 s more after a 20 s outage,
and its checks of eight dropped connections, one by one, outlasted a request's 30 s."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg_pool import ConnectionPool, PoolTimeout

from effectively_once import connection_pools
from effectively_once.connection_pools import RECONNECT_TIMEOUT
from services.settings import over_tcp
from tests.support.tcp_gate import TcpGate

OUTAGE_SECONDS = 20.0
"""Long enough that the default backoff's next try falls 11 s after the database is back."""


@pytest.fixture
def gate(runtime_db: str) -> Iterator[TcpGate]:
    parts = urlsplit(runtime_db)
    gate = TcpGate((parts.hostname or "127.0.0.1", parts.port or 5432))
    gate.open()
    yield gate
    gate.shut()


def _through(url: str, gate: TcpGate) -> str:
    parts = urlsplit(over_tcp(url))
    credentials = parts.netloc.rsplit("@", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{credentials}@127.0.0.1:{gate.port}"))


def test_a_pool_answers_within_its_reconnect_bound_once_its_database_is_back(runtime_db: str, gate: TcpGate) -> None:
    url = _through(runtime_db, gate)
    pool = connection_pools.serving_pool(url, min_size=1, max_size=2, kwargs={"connect_timeout": 5})
    pool.open(wait=True, timeout=30)
    try:
        gate.shut()
        refused = 0
        away_until = time.monotonic() + OUTAGE_SECONDS
        while time.monotonic() < away_until:  # requests keep coming while the database is away
            try:
                with pool.connection(timeout=1) as connection:
                    connection.execute("SELECT 1")
            except (PoolTimeout, psycopg.OperationalError):
                refused += 1
        assert refused > 0, "the outage refused nothing: the gate did not shut"
        gate.open()
        back = time.monotonic()
        with pool.connection(timeout=30) as connection:
            assert connection.execute("SELECT 1").fetchone() == (1,)
        waited = time.monotonic() - back
    finally:
        pool.close()
    assert waited < RECONNECT_TIMEOUT + 1, f"the pool answered {waited:.1f} s after its database came back"


POOL_SIZE = 8
"""The orders API's most connections: a pool grown to it under load before the server dropped them."""


def _drop_every_connection(runtime_db: str, application_name: str, expected: int = POOL_SIZE) -> None:
    """What a failover or a restart does to each of a pool's connections: once this returns, each
    session has ended (pg_terminate_backend waits for it, up to 5 s)."""
    with psycopg.connect(runtime_db, autocommit=True) as admin:
        dropped = admin.execute(
            """SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 5000))
               FROM pg_stat_activity WHERE application_name = %s""",
            (application_name,),
        ).fetchone()
    assert dropped == (expected,)


# psycopg_pool checks the dropped connections one by one, waiting 1, 2, 4, 8 s... between them: 8 of
# them outlast a request's 30 s. Draining the pool at the first failed check spares the wait.
DROPPED_ANSWER_SECONDS = 1.0


def test_a_pool_whose_every_connection_the_server_dropped_answers_its_next_request_at_once(runtime_db: str) -> None:
    name = f"dropped-{uuid.uuid4().hex[:8]}"
    pool = connection_pools.serving_pool(runtime_db, min_size=1, max_size=POOL_SIZE, kwargs={"application_name": name})
    pool.open(wait=True, timeout=30)
    try:
        with contextlib.ExitStack() as held:  # as many requests at once as the pool serves: it grows to its most
            for _ in range(POOL_SIZE):
                held.enter_context(pool.connection(timeout=30)).execute("SELECT 1")
        assert pool.get_stats()["pool_size"] == POOL_SIZE
        _drop_every_connection(runtime_db, name)
        asked = time.monotonic()
        with pool.connection(timeout=30) as connection:
            assert connection.execute("SELECT 1").fetchone() == (1,)
        waited = time.monotonic() - asked
    finally:
        pool.close()
    assert waited < DROPPED_ANSWER_SECONDS, f"the pool answered {waited:.1f} s after its connections were dropped"


def test_an_asyncio_pool_whose_every_connection_the_server_dropped_answers_at_once(runtime_db: str) -> None:
    name = f"dropped-{uuid.uuid4().hex[:8]}"

    async def scenario() -> float:
        pool = connection_pools.serving_async_pool(
            runtime_db, min_size=1, max_size=POOL_SIZE, kwargs={"application_name": name, "autocommit": True}
        )
        await pool.open(wait=True, timeout=30)
        try:
            async with contextlib.AsyncExitStack() as held:
                for _ in range(POOL_SIZE):
                    await (await held.enter_async_context(pool.connection(timeout=30))).execute("SELECT 1")
            assert pool.get_stats()["pool_size"] == POOL_SIZE
            await asyncio.to_thread(_drop_every_connection, runtime_db, name)
            asked = time.monotonic()
            async with pool.connection(timeout=30) as connection:
                assert await (await connection.execute("SELECT 1")).fetchone() == (1,)
            return time.monotonic() - asked
        finally:
            await pool.close()

    waited = asyncio.run(scenario())
    assert waited < DROPPED_ANSWER_SECONDS, f"the pool answered {waited:.1f} s after its connections were dropped"


def test_a_connection_is_quiet_until_the_server_drops_it(runtime_db: str) -> None:
    """A quiet connection is handed out without a round trip; one the server dropped never is."""
    name = f"quiet-{uuid.uuid4().hex[:8]}"
    with psycopg.connect(runtime_db, application_name=name) as connection:
        connection.execute("SELECT 1").fetchone()
        assert connection_pools.quiet(connection) is False, "a transaction is open: not idle"
        connection.rollback()
        assert connection_pools.quiet(connection) is True
        _drop_every_connection(runtime_db, name, expected=1)
        assert connection_pools.quiet(connection) is False, "the server closed it, and its socket says so"
        with pytest.raises(psycopg.OperationalError):
            ConnectionPool.check_connection(connection)
    assert connection_pools.quiet(connection) is False, "closed"


def test_a_pool_checks_over_the_wire_only_a_connection_that_is_not_quiet(
    runtime_db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = f"quiet-pool-{uuid.uuid4().hex[:8]}"
    checked: list[object] = []
    check_over_the_wire = ConnectionPool.check_connection

    def counted(connection: psycopg.Connection[Any]) -> None:
        checked.append(connection)
        check_over_the_wire(connection)

    monkeypatch.setattr(ConnectionPool, "check_connection", staticmethod(counted))
    pool = connection_pools.serving_pool(runtime_db, min_size=1, max_size=1, kwargs={"application_name": name})
    pool.open(wait=True, timeout=30)
    try:
        for _ in range(20):
            with pool.connection(timeout=30) as connection:
                connection.execute("SELECT 1")
        assert checked == [], "a quiet connection was checked over the wire"
        _drop_every_connection(runtime_db, name, expected=1)
        with pool.connection(timeout=30) as connection:
            assert connection.execute("SELECT 1").fetchone() == (1,)
        assert len(checked) >= 1, "the dropped connection was handed out unchecked"
    finally:
        pool.close()
