"""The runtime's tables, created by numbered SQL migrations, and the relay's grant.

`migrate` applies the runtime's migrations (namespace `runtime`, from this package) and then a
service's own folders, each at most once, recorded in `schema_migration`. Concurrent callers
serialise on an advisory lock. The relay's role is the operator's choice, so its grant is a step
of its own (`grant_relay`), not part of a migration.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql

MIGRATIONS = Path(__file__).parent / "migrations"
"""The runtime's migrations: processed_message, outbox, consumer_setting, marker_retention, and
both tables partitioned by day."""
NAMESPACE = "runtime"
MIGRATION_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
LOCK = 7_301_001
"""pg_advisory_xact_lock key every migrating process takes."""

SCHEMA_MIGRATION = """CREATE TABLE IF NOT EXISTS schema_migration (
    namespace  text        NOT NULL,
    version    integer     NOT NULL,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (namespace, version))"""


class MigrationError(ValueError):
    """A migration folder holds a file this module will not guess about."""


@dataclass(frozen=True)
class Migration:
    namespace: str
    version: int
    path: Path


def migrations_in(namespace: str, folder: Path) -> list[Migration]:
    """The folder's `NNNN_description.sql` files in version order; any other .sql name is an error."""
    if not folder.is_dir():
        raise MigrationError(f"{folder} is not a folder of migrations")
    found = []
    for path in sorted(folder.glob("*.sql")):
        match = MIGRATION_NAME.match(path.name)
        if not match:
            raise MigrationError(f"migration {path} is not named NNNN_description.sql (e.g. 0002_add_reservations.sql)")
        found.append(Migration(namespace, int(match.group(1)), path))
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise MigrationError(f"two migrations in {folder} share a version number")
    return found


def migrate(
    connection: psycopg.Connection[Any], own: Iterable[tuple[str, Path]] = (), runtime: bool = True
) -> list[str]:
    """Apply the runtime's migrations (unless `runtime` is False), then each (namespace, folder)
    of `own`, each migration in a transaction of its own with its record; return the names
    applied now. The connection must be in autocommit mode and belong to the role that should
    own the tables."""
    if not connection.autocommit:
        raise ValueError("migrate needs an autocommit connection: each migration is its own transaction")
    pending = migrations_in(NAMESPACE, MIGRATIONS) if runtime else []
    for namespace, folder in own:
        if namespace == NAMESPACE:
            raise MigrationError(f"the namespace {NAMESPACE!r} is the runtime's own")
        pending += migrations_in(namespace, Path(folder))
    connection.execute(SCHEMA_MIGRATION)
    applied: list[str] = []
    for migration in pending:
        with connection.transaction():
            connection.execute("SELECT pg_advisory_xact_lock(%s)", (LOCK,))
            done = connection.execute(
                "SELECT 1 FROM schema_migration WHERE namespace = %s AND version = %s",
                (migration.namespace, migration.version),
            ).fetchone()
            if done:
                continue
            connection.execute(migration.path.read_text())
            connection.execute(
                "INSERT INTO schema_migration (namespace, version, name) VALUES (%s, %s, %s)",
                (migration.namespace, migration.version, migration.path.name),
            )
            applied.append(f"{migration.namespace}/{migration.path.name}")
    return applied


def grant_relay(connection: psycopg.Connection[Any], role: str) -> None:
    """Let `role` (the relay's) read, mark and purge outbox rows, and create and drop the outbox's
    day partitions through the owner's two functions (migration 0006), and nothing else."""
    if not role:
        raise ValueError("the relay's role must be named")
    connection.execute(sql.SQL("GRANT SELECT, UPDATE, DELETE ON outbox TO {}").format(sql.Identifier(role)))
    connection.execute(
        sql.SQL("GRANT EXECUTE ON FUNCTION outbox_upkeep(), outbox_drop_day(date, timestamptz) TO {}").format(
            sql.Identifier(role)
        )
    )
