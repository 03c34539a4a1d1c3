"""The runtime's tables, created by numbered SQL migrations, and the relay's grant.

`migrate` applies the runtime's migrations (namespace `runtime`, from this package) and then a
service's own folders, each at most once, recorded in `schema_migration`. Concurrent callers
serialise on an advisory lock. The roles are the operator's choice, so their grants are steps of
their own, not part of a migration: run the migrations as the role that should own the tables,
then let the service's role use them (`grant_service`: it reads and writes, and creates nothing)
and the relay's role publish the outbox (`grant_relay`).
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


def grant_service(connection: psycopg.Connection[Any], role: str, runtime: bool = True) -> None:
    """Let `role` (a service's, which owns nothing) use the current schema's tables, those there now
    and those the owner makes later (the day partitions): read and write rows and use sequences,
    and, where the runtime's tables are (`runtime`), create and drop the markers' day partitions
    through the owner's two SECURITY DEFINER functions (migration 0008). Nothing more: it may not
    create or alter a table. Run it as the tables' owner."""
    if not role:
        raise ValueError("the service's role must be named")
    row = connection.execute("SELECT current_schema()").fetchone()
    assert row is not None
    names = {"schema": sql.Identifier(row[0]), "role": sql.Identifier(role)}
    for statement in (
        "GRANT USAGE ON SCHEMA {schema} TO {role}",
        "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {role}",
        "GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {schema} TO {role}",
        "ALTER DEFAULT PRIVILEGES IN SCHEMA {schema} GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {role}",
        "ALTER DEFAULT PRIVILEGES IN SCHEMA {schema} GRANT USAGE, SELECT ON SEQUENCES TO {role}",
    ):
        connection.execute(sql.SQL(statement).format(**names))
    if runtime:
        connection.execute(
            sql.SQL(
                "GRANT EXECUTE ON FUNCTION processed_message_day(date), "
                "processed_message_drop_day(date, timestamptz, text) TO {role}"
            ).format(**names)
        )


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
