"""One database and one least-privilege role per service, and numbered SQL migrations.

Idempotent: every step checks what exists, so `make up` may run it any number of times, and two
launchers at once serialise on an advisory lock.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql

from infra.launcher.errors import LaunchError
from services import idempotent_consumer
from services.settings import PROJECT_ROOT, Settings, redact
from services.topology import AUDITOR_ROLE, DATABASES, RELAY_ROLE, ServiceDatabase

MIGRATION_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")
PROVISIONING_LOCK = 7_301_001  # pg_advisory_lock key shared by every launcher


@dataclass(frozen=True)
class Migration:
    namespace: str
    version: int
    path: Path


def migrations_for(database: ServiceDatabase) -> list[Migration]:
    """The runtime's migrations (where the service uses it), then the service's own, in order."""
    sources: list[tuple[str, Path]] = []
    if database.runs_consumer_runtime:
        sources.append(("runtime", idempotent_consumer.MIGRATIONS))
    sources.append((database.name, PROJECT_ROOT / "services" / database.name / "migrations"))
    found: list[Migration] = []
    for namespace, folder in sources:
        if not folder.is_dir():
            continue
        for path in sorted(folder.glob("*.sql")):
            match = MIGRATION_NAME.match(path.name)
            if not match:
                raise LaunchError(
                    f"migration {path} is not named NNNN_description.sql",
                    "rename it, e.g. 0002_add_reservations.sql",
                )
            found.append(Migration(namespace, int(match.group(1)), path))
    return found


def _ensure_role(admin: psycopg.Connection, role: str, password: str) -> None:
    exists = admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone()
    verb = "ALTER" if exists else "CREATE"
    admin.execute(
        sql.SQL("{} ROLE {} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE PASSWORD {}").format(
            sql.SQL(verb), sql.Identifier(role), sql.Literal(password)
        )
    )


def _ensure_database(admin: psycopg.Connection, database: ServiceDatabase) -> None:
    exists = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database.name,)).fetchone()
    name, role = sql.Identifier(database.name), sql.Identifier(database.role)
    if not exists:
        admin.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(name, role))
    # Only the service's own role (and the read-only auditor) may connect to its database.
    admin.execute(sql.SQL("REVOKE ALL ON DATABASE {} FROM PUBLIC").format(name))
    admin.execute(sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(name, sql.Identifier(AUDITOR_ROLE)))
    if database.runs_consumer_runtime:
        admin.execute(sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(name, sql.Identifier(RELAY_ROLE)))


def apply_migrations(url: str, database: ServiceDatabase) -> list[str]:
    """Apply, as the service's own role, every migration not applied yet; return their names."""
    applied_now: list[str] = []
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(
            """CREATE TABLE IF NOT EXISTS schema_migration (
                   namespace  text        NOT NULL,
                   version    integer     NOT NULL,
                   name       text        NOT NULL,
                   applied_at timestamptz NOT NULL DEFAULT now(),
                   PRIMARY KEY (namespace, version))"""
        )
        for migration in migrations_for(database):
            with connection.transaction():
                connection.execute("SELECT pg_advisory_xact_lock(%s)", (PROVISIONING_LOCK,))
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
                applied_now.append(f"{database.name}: {migration.namespace}/{migration.path.name}")
        # The auditor reads every table, now and later; it writes none.
        connection.execute(sql.SQL("GRANT USAGE ON SCHEMA public TO {}").format(sql.Identifier(AUDITOR_ROLE)))
        connection.execute(
            sql.SQL("GRANT SELECT ON ALL TABLES IN SCHEMA public TO {}").format(sql.Identifier(AUDITOR_ROLE))
        )
        connection.execute(
            sql.SQL("ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO {}").format(
                sql.Identifier(AUDITOR_ROLE)
            )
        )
    return applied_now


def provision(settings: Settings, say: Callable[[str], None]) -> None:
    """Create roles and databases, then migrate every service database."""
    try:
        with psycopg.connect(settings.admin_database_url, autocommit=True, connect_timeout=5) as admin:
            admin.execute("SELECT pg_advisory_lock(%s)", (PROVISIONING_LOCK,))
            try:
                _ensure_role(admin, AUDITOR_ROLE, settings.AUDITOR_DB_PASSWORD)
                _ensure_role(admin, RELAY_ROLE, settings.OUTBOX_RELAY_DB_PASSWORD)
                for database in DATABASES:
                    _ensure_role(admin, database.role, settings.database_password(database))
                    _ensure_database(admin, database)
            finally:
                admin.execute("SELECT pg_advisory_unlock(%s)", (PROVISIONING_LOCK,))
        for database in DATABASES:
            for name in apply_migrations(settings.service_database_url(database), database):
                say(f"migrated {name}")
    except psycopg.Error as error:
        raise LaunchError(
            f"provisioning the service databases on {redact(settings.admin_database_url)} failed: {str(error).strip()}",
            "DATABASE_URL must name a role that may create roles and databases (a superuser)",
        ) from error
