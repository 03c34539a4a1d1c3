"""Migration files applied as they are, into a schema of a test's own, and recorded as
`schema.migrate` records them: a later `migrate` on that schema (the contract suite's, a
service's) applies only what is newer, as on a real database, instead of running them again."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import psycopg

from effectively_once import schema


def apply_files(connection: psycopg.Connection[Any], migrations: Iterable[Path]) -> None:
    """Run each file in the connection's search_path; record the runtime's own among them."""
    connection.execute(schema.SCHEMA_MIGRATION)
    for migration in migrations:
        connection.execute(migration.read_text())
        if migration.parent == schema.MIGRATIONS:
            version = int(migration.name[:4])
            connection.execute(
                "INSERT INTO schema_migration (namespace, version, name) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
                (schema.NAMESPACE, version, migration.name),
            )
