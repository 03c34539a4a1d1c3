"""One database and one least-privilege role per service, and numbered SQL migrations.

Each database and its tables belong to an owner role that cannot log in (`<database>_owner`): the
migrations run as it (the launcher's admin connection, `SET ROLE`). The service's own role may
connect, read and write the tables and use what the owner grants, and create nothing: not a
table in `public`, not a temporary one. A database provisioned before owner roles existed (its
service's role owned it) is handed over on the next run.

Idempotent: every step checks what exists, so `make up` may run it any number of times, and two
launchers at once serialise on an advisory lock.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote, urlsplit

import psycopg
from psycopg import sql

from effectively_once import schema
from infra.launcher.errors import LaunchError
from services.settings import PROJECT_ROOT, Settings, redact, with_credentials
from services.topology import AUDITOR_ROLE, DATABASES, RELAY_ROLE, ServiceDatabase

PROVISIONING_LOCK = schema.LOCK  # pg_advisory_lock key shared by every launcher


def migration_folders(database: ServiceDatabase) -> list[tuple[str, Path]]:
    """The service's own migrations, applied after the runtime's."""
    folder = PROJECT_ROOT / "services" / database.name / "migrations"
    return [(database.name, folder)] if folder.is_dir() else []


def migrations_for(database: ServiceDatabase) -> list[schema.Migration]:
    """Every migration the database receives, in the order they are applied."""
    runtime = schema.migrations_in(schema.NAMESPACE, schema.MIGRATIONS) if database.runs_consumer_runtime else []
    return runtime + [m for ns, folder in migration_folders(database) for m in schema.migrations_in(ns, folder)]


def _ensure_role(admin: psycopg.Connection, role: str, password: str | None) -> None:
    """A login role with `password`, or, without one, a role that cannot log in (an owner)."""
    exists = admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone()
    verb = "ALTER" if exists else "CREATE"
    login = sql.SQL("LOGIN PASSWORD {}").format(sql.Literal(password)) if password is not None else sql.SQL("NOLOGIN")
    admin.execute(
        sql.SQL("{} ROLE {} {} NOSUPERUSER NOCREATEDB NOCREATEROLE").format(sql.SQL(verb), sql.Identifier(role), login)
    )


def _ensure_database(admin: psycopg.Connection, database: ServiceDatabase) -> None:
    exists = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (database.name,)).fetchone()
    name, owner = sql.Identifier(database.name), sql.Identifier(database.owner)
    if not exists:
        admin.execute(sql.SQL("CREATE DATABASE {} OWNER {}").format(name, owner))
    else:
        admin.execute(sql.SQL("ALTER DATABASE {} OWNER TO {}").format(name, owner))
    # Only the service's own role (and the read-only auditor) may connect to its database; nobody
    # but the owner may create anything in it (REVOKE ALL takes TEMPORARY from PUBLIC too).
    admin.execute(sql.SQL("REVOKE ALL ON DATABASE {} FROM PUBLIC").format(name))
    admin.execute(sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(name, sql.Identifier(database.role)))
    admin.execute(sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(name, sql.Identifier(AUDITOR_ROLE)))
    if database.runs_consumer_runtime:
        admin.execute(sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(name, sql.Identifier(RELAY_ROLE)))


def _ensure_replication_role(admin: psycopg.Connection, database: ServiceDatabase, password: str) -> None:
    """The role Debezium reads `database`'s outbox through (RELAY=debezium): it may log in, stream
    the write-ahead log, read the outbox and rewrite its heartbeat row (granted by
    `apply_migrations`), and nothing else."""
    _ensure_role(admin, database.cdc_role, password)
    admin.execute(sql.SQL("ALTER ROLE {} REPLICATION").format(sql.Identifier(database.cdc_role)))
    admin.execute(
        sql.SQL("GRANT CONNECT ON DATABASE {} TO {}").format(
            sql.Identifier(database.name), sql.Identifier(database.cdc_role)
        )
    )


def apply_migrations(admin_url: str, database: ServiceDatabase, cdc: bool = False) -> list[str]:
    """Apply, as the database's owner role, every migration not applied yet (the runtime's first,
    where the service runs it); return their names. The service's role may then use the tables
    and create nothing (`schema.grant_service`); `cdc`: its replication role may read the outbox.
    `admin_url` reaches the database as a role that may act as its owner (a superuser)."""
    with psycopg.connect(admin_url, autocommit=True) as connection:
        # A database provisioned before owner roles: its service's role owned it and its tables.
        connection.execute(
            sql.SQL("REASSIGN OWNED BY {} TO {}").format(sql.Identifier(database.role), sql.Identifier(database.owner))
        )
        connection.execute("REVOKE CREATE ON SCHEMA public FROM PUBLIC")  # PostgreSQL 14 and older granted it
        connection.execute(sql.SQL("SET ROLE {}").format(sql.Identifier(database.owner)))
        try:
            runtime = database.runs_consumer_runtime
            applied_now = schema.migrate(connection, migration_folders(database), runtime=runtime)
            schema.grant_service(connection, database.role, runtime=runtime)
            if runtime:
                schema.grant_relay(connection, RELAY_ROLE)
            if runtime and cdc:
                role = sql.Identifier(database.cdc_role)
                connection.execute(sql.SQL("GRANT SELECT ON outbox TO {}").format(role))
                # its heartbeat (heartbeat.action.query) rewrites this one row, and no other
                connection.execute(sql.SQL("GRANT INSERT, DELETE ON outbox_cdc_heartbeat TO {}").format(role))
        except schema.MigrationError as error:
            raise LaunchError(str(error), "rename it, e.g. 0002_add_reservations.sql") from error
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
    return [f"{database.name}: {name}" for name in applied_now]


def _admin_credentials(admin_url: str) -> tuple[str, str]:
    parts = urlsplit(admin_url)
    return unquote(parts.username or "postgres"), unquote(parts.password or "")


def provision(settings: Settings, say: Callable[[str], None]) -> None:
    """Create roles and databases, then migrate every service database; with RELAY=debezium,
    a replication role for each outbox database too."""
    cdc = settings.RELAY == "debezium"
    try:
        with psycopg.connect(settings.admin_database_url, autocommit=True, connect_timeout=5) as admin:
            admin.execute("SELECT pg_advisory_lock(%s)", (PROVISIONING_LOCK,))
            try:
                _ensure_role(admin, AUDITOR_ROLE, settings.AUDITOR_DB_PASSWORD)
                _ensure_role(admin, RELAY_ROLE, settings.OUTBOX_RELAY_DB_PASSWORD)
                for database in DATABASES:
                    _ensure_role(admin, database.role, settings.database_password(database))
                    _ensure_role(admin, database.owner, None)
                    # The admin runs the migrations as the owner (SET ROLE): a superuser may; a
                    # managed database's admin role needs the membership.
                    admin.execute(sql.SQL("GRANT {} TO CURRENT_USER").format(sql.Identifier(database.owner)))
                    _ensure_database(admin, database)
                    if cdc and database.runs_consumer_runtime:
                        _ensure_replication_role(admin, database, settings.cdc_password(database))
            finally:
                admin.execute("SELECT pg_advisory_unlock(%s)", (PROVISIONING_LOCK,))
        for database in DATABASES:
            admin_url = with_credentials(
                settings.admin_database_url, *_admin_credentials(settings.admin_database_url), database.name
            )
            for name in apply_migrations(admin_url, database, cdc):
                say(f"migrated {name}")
    except psycopg.Error as error:
        raise LaunchError(
            f"provisioning the service databases on {redact(settings.admin_database_url)} failed: {str(error).strip()}",
            "DATABASE_URL must name a role that may create roles and databases (a superuser)",
        ) from error
