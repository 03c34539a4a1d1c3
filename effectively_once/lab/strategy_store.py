"""Where a run-time strategy switch is kept: the `consumer_setting` table of the service's database.

The environment (CONSUMER_STRATEGY) gives the strategy a consumer starts with; a switch made
through the control endpoint is stored here and wins over it, across restarts, until it is
switched back.
"""

from __future__ import annotations

from typing import Any

import psycopg

from ..outcomes import Strategy

Connection = psycopg.Connection[Any]


def load(connection: Connection, consumer_name: str) -> Strategy | None:
    """The stored strategy, or None when there is none (or it names one this code lacks)."""
    row = connection.execute(
        "SELECT strategy FROM consumer_setting WHERE consumer_name = %s", (consumer_name,)
    ).fetchone()
    if row is None or row[0] not in Strategy.__members__.values():
        return None
    return Strategy(row[0])


def save(connection: Connection, consumer_name: str, strategy: Strategy) -> None:
    connection.execute(
        "INSERT INTO consumer_setting (consumer_name, strategy) VALUES (%s, %s) "
        "ON CONFLICT (consumer_name) DO UPDATE SET strategy = excluded.strategy, updated_at = now()",
        (consumer_name, strategy.value),
    )
