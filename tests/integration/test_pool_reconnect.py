"""A pool of connections built here answers again soon after its database comes back, however long
it was away (effectively_once.connection_pools): its wait is bounded by RECONNECT_TIMEOUT, not by
psycopg_pool's doubling backoff, which after a 20 s outage kept a pool waiting 8 to 16 s more and
after a 40 s one 24 s, so that the orders API answered 503 once a failover was over."""

from __future__ import annotations

import time
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg_pool import ConnectionPool, PoolTimeout

from effectively_once.connection_pools import RECONNECT_TIMEOUT
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
    parts = urlsplit(url)
    credentials = parts.netloc.rsplit("@", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{credentials}@127.0.0.1:{gate.port}"))


def test_a_pool_answers_within_its_reconnect_bound_once_its_database_is_back(runtime_db: str, gate: TcpGate) -> None:
    pool = ConnectionPool(
        _through(runtime_db, gate),
        reconnect_timeout=RECONNECT_TIMEOUT,
        min_size=1,
        max_size=2,
        open=False,
        kwargs={"connect_timeout": 5},
        check=ConnectionPool.check_connection,
    )
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
