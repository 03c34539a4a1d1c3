"""The runtime's console commands against real PostgreSQL: `effectively-once-migrate` (the
runtime's tables, a team's own, the relay's grant and nothing more) and `effectively-once-purge`
(expired markers and published outbox rows; nothing younger, nothing unpublished)."""

from __future__ import annotations

import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from effectively_once import cli
from effectively_once.consumer.transaction import CLAIM, claim_row
from effectively_once.envelope import Envelope
from effectively_once.outbox import add_to_outbox
from services.settings import Settings
from tests.integration.conftest import isolated_schema
from tests.support.markers import backdated_markers


@pytest.fixture
def empty_schema(runtime_db: str) -> str:
    return isolated_schema(runtime_db)


def test_migrate_creates_the_runtime_then_the_teams_own_once_and_grants_the_relay_only_what_it_needs(
    empty_schema: str, settings: Settings, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    own = tmp_path / "migrations"
    own.mkdir()
    (own / "0001_points.sql").write_text("CREATE TABLE points (id text PRIMARY KEY);")
    role = f"relay_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(settings.admin_database_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} NOLOGIN").format(sql.Identifier(role)))
    try:
        cli.migrate_main(["--database-url", empty_schema, "--own", f"points={own}", "--relay-role", role])
        said = capsys.readouterr().out
        assert "applied runtime/0004_marker_retention.sql" in said and "applied points/0001_points.sql" in said
        assert f"granted SELECT, UPDATE, DELETE on outbox to {role}" in said
        cli.migrate_main(["--database-url", empty_schema, "--own", f"points={own}"])
        assert "0 migration(s) applied" in capsys.readouterr().out
        with psycopg.connect(empty_schema) as connection:
            granted = {
                privilege: connection.execute(
                    "SELECT has_table_privilege(%s, 'outbox', %s)", (role, privilege)
                ).fetchone()
                for privilege in ("SELECT", "UPDATE", "DELETE", "INSERT", "TRUNCATE")
            }
            marker_access = connection.execute(
                "SELECT has_table_privilege(%s, 'processed_message', 'SELECT')", (role,)
            ).fetchone()
        assert granted == {
            "SELECT": (True,),
            "UPDATE": (True,),
            "DELETE": (True,),
            "INSERT": (False,),
            "TRUNCATE": (False,),
        }
        assert marker_access == (False,)
    finally:
        with psycopg.connect(empty_schema, autocommit=True) as connection:
            connection.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
        with psycopg.connect(settings.admin_database_url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_migrate_grants_a_service_role_reads_writes_and_the_day_functions_and_no_creation(
    empty_schema: str, settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    role, password = f"service_{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    with psycopg.connect(settings.admin_database_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(sql.Identifier(role), sql.Literal(password)))
    try:
        cli.migrate_main(["--database-url", empty_schema, "--service-role", role])
        assert f"granted {role} reads and writes" in capsys.readouterr().out
        as_service = make_conninfo(empty_schema, user=role, password=password)
        with psycopg.connect(as_service, autocommit=True) as connection:
            event = Envelope.new("PointsAwarded", "o-1", {})
            connection.execute(CLAIM, claim_row("loyalty-points-v1", event))
            connection.execute("SELECT processed_message_day(current_date + 9)")  # a day made through the owner
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                connection.execute("CREATE TABLE trespass (id int)")
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                connection.execute("DROP TABLE processed_message_default")
            assert connection.execute("SELECT count(*) FROM processed_message").fetchone() == (1,)
    finally:
        with psycopg.connect(empty_schema, autocommit=True) as connection:
            connection.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
        with psycopg.connect(settings.admin_database_url, autocommit=True) as admin:
            admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_migrate_refuses_a_misnamed_file_before_applying_anything(empty_schema: str, tmp_path: Path) -> None:
    (tmp_path / "add_points.sql").write_text("CREATE TABLE points (id text);")
    with pytest.raises(SystemExit, match=r"NNNN_description\.sql"):
        cli.migrate_main(["--database-url", empty_schema, "--own", f"points={tmp_path}"])
    with psycopg.connect(empty_schema) as connection:
        assert connection.execute("SELECT to_regclass('processed_message')").fetchone() == (None,)


def test_purge_deletes_what_is_past_the_horizons_and_nothing_else(
    empty_schema: str, capsys: pytest.CaptureFixture[str]
) -> None:
    cli.migrate_main(["--database-url", empty_schema])
    consumer = "loyalty-points-v1"
    for days, count in ((40, 3), (1, 2)):
        backdated_markers(empty_schema, consumer, count, days_old=days)
    with psycopg.connect(empty_schema) as connection:
        # Rows are kept until their day's turn came: three days back it has, whatever the hour.
        for hours, published in ((72, True), (2, True), (72, False)):
            event = Envelope.new("PointsAwarded", f"o-{uuid.uuid4().hex[:6]}", {})
            add_to_outbox(connection, event, "loyalty.events")
            connection.execute(
                "UPDATE outbox SET created_at = now() - make_interval(hours => %s), "
                "published_at = CASE WHEN %s THEN now() - make_interval(hours => %s) END WHERE message_id = %s",
                (hours, published, hours, event.message_id),
            )
    capsys.readouterr()
    cli.purge_main(
        ["--database-url", empty_schema, "--horizon-days", "30", "--consumer", consumer, "--outbox-hours", "24"]
    )
    said = capsys.readouterr().out
    assert "purged 3 marker(s)" in said and "purged 1 outbox row(s)" in said, said
    with psycopg.connect(empty_schema) as connection:
        assert connection.execute("SELECT count(*) FROM processed_message").fetchone() == (2,)
        assert connection.execute("SELECT count(*) FROM outbox").fetchone() == (2,)  # young, and unpublished
        recorded = connection.execute(
            "SELECT purged_through < now() - interval '29 days' FROM marker_retention WHERE consumer_name = %s",
            (consumer,),
        ).fetchone()
    assert recorded == (True,)


def test_an_unreachable_database_is_one_line_naming_the_command() -> None:
    with pytest.raises(SystemExit, match="effectively-once-purge: "):
        cli.purge_main(["--database-url", "postgresql://nobody@127.0.0.1:9/none?connect_timeout=2"])
