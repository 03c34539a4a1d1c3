"""How every pool of PostgreSQL connections here comes back after the database was away.

psycopg_pool tries a lost connection again with a wait that doubles after each failed try (1, 2,
4, 8 s...) for as long as one chain of tries may last, `reconnect_timeout`: five minutes unless
told. Measured against a server stopped and started again, a pool with that default answered its
first request 8 s after a 20 s outage ended and 24 s after a 40 s one, refusing work meanwhile (the
orders API answered 503, a consumer stood idle) although the database, or the standby promoted in
its place, was there. A chain that gives up after RECONNECT_TIMEOUT seconds bounds that wait: the
next request that finds no connection starts a new chain, whose first try is at once. The relay's
own reconnection loop (relay/worker.py) waits at most as long between its tries.
"""

from __future__ import annotations

RECONNECT_TIMEOUT = 5.0
"""Seconds one chain of reconnection tries lasts: the most a pool waits, once its database is back,
before trying it again (psycopg_pool's `reconnect_timeout`)."""
