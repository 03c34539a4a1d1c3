"""How every pool of PostgreSQL connections here comes back after the database was away.

Two waits of psycopg_pool's, each measured as a 503 from the orders API with the database there:

- A lost connection is tried again with a wait that doubles after each failed try (1, 2, 4, 8 s...)
  for as long as one chain of tries may last, `reconnect_timeout`: five minutes unless told. A pool
  with that default answered its first request 8 s after a 20 s outage ended and 24 s after a 40 s
  one. A chain that gives up after RECONNECT_TIMEOUT seconds bounds that wait: the next request
  that finds no connection starts a new chain, whose first try is at once. The relay's own
  reconnection loop (relay/worker.py) waits at most as long between its tries.
- A pool that checks each connection as it hands it out (`check`) takes the next one when a check
  fails, waiting 0, 1, 2, 4, 8 s... between them. A failover or a restart drops every connection at
  once, so a pool grown to 8 under load spent a request's 30 s on the dead ones and answered
  PoolTimeout. The pools `serving_pool` and `serving_async_pool` build drain themselves at the
  first failed check instead: every connection older than the failure is replaced, and the request
  waits only for a fresh one.

A check costs a round trip to the server, one more for every request. A connection is checked over
the wire only when its socket is not quiet (`quiet`): a server that drops a connection (a failover,
a restart, `pg_terminate_backend`) sends its error and closes it, and either wakes the socket. A
connection whose socket has nothing to read, idle and not broken, is handed out without one.
"""

from __future__ import annotations

import select
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool, ConnectionPool

RECONNECT_TIMEOUT = 5.0
"""Seconds one chain of reconnection tries lasts: the most a pool waits, once its database is back,
before trying it again (psycopg_pool's `reconnect_timeout`)."""


def quiet(connection: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """True when the server has sent nothing on `connection` since its last answer (no error, no
    end of stream) and the connection is idle and not broken: then it needs no check over the wire.
    False whenever that cannot be told."""
    if connection.closed or connection.broken or connection.info.transaction_status != TransactionStatus.IDLE:
        return False
    try:
        waiting = select.poll()
        waiting.register(connection.fileno(), select.POLLIN | select.POLLPRI)
        return not waiting.poll(0)
    except (OSError, ValueError, psycopg.Error):
        return False


def serving_pool(conninfo: str, **options: Any) -> ConnectionPool:
    """A pool for request handlers, not yet open: each connection is checked as it is handed out
    (over the wire unless it is `quiet`), and one that fails its check drains the pool (every
    connection made before it is replaced)."""

    def check(connection: psycopg.Connection[Any]) -> None:
        if quiet(connection):
            return
        try:
            ConnectionPool.check_connection(connection)
        except psycopg.Error:
            pool.drain()
            raise

    pool: ConnectionPool = ConnectionPool(
        conninfo, reconnect_timeout=RECONNECT_TIMEOUT, check=check, open=False, **options
    )
    return pool


def serving_async_pool(conninfo: str, **options: Any) -> AsyncConnectionPool:
    """`serving_pool` for asyncio's request handlers."""

    async def check(connection: psycopg.AsyncConnection[Any]) -> None:
        if quiet(connection):
            return
        try:
            await AsyncConnectionPool.check_connection(connection)
        except psycopg.Error:
            await pool.drain()
            raise

    pool: AsyncConnectionPool = AsyncConnectionPool(
        conninfo, reconnect_timeout=RECONNECT_TIMEOUT, check=check, open=False, **options
    )
    return pool
