"""Each service has its own database and a least-privilege role; migrations are idempotent."""

from __future__ import annotations

import uuid
from urllib.parse import urlsplit

import psycopg
import pytest
from confluent_kafka.admin import AdminClient

from effectively_once.kafka_client import client_config
from infra.launcher.provisioning import apply_migrations, migrations_for
from services.settings import Settings, with_credentials
from services.topology import CONSUMERS, DATABASES, TOPIC_PARTITIONS, ServiceDatabase, all_topics, database


def _admin_url(settings: Settings, name: str) -> str:
    parts = urlsplit(settings.admin_database_url)
    return with_credentials(settings.admin_database_url, parts.username or "postgres", parts.password or "", name)


def test_every_service_database_is_migrated_and_a_second_run_applies_nothing(
    settings: Settings,
) -> None:
    for service_database in DATABASES:
        assert apply_migrations(_admin_url(settings, service_database.name), service_database) == []
        with psycopg.connect(settings.service_database_url(service_database)) as connection:
            applied = connection.execute("SELECT count(*) FROM schema_migration").fetchone()
        assert applied == (len(migrations_for(service_database)),)


@pytest.mark.parametrize("service_database", DATABASES, ids=lambda d: d.name)
def test_a_service_role_reads_and_writes_its_tables_and_creates_nothing(
    settings: Settings, service_database: ServiceDatabase
) -> None:
    """Only the database's owner role (which cannot log in; the migrations run as it) may create:
    not a table in public, not a temporary one, not a function."""
    with psycopg.connect(settings.service_database_url(service_database), autocommit=True) as connection:
        owner = connection.execute(
            "SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = current_database()"
        ).fetchone()
        assert owner == (service_database.owner,)
        tables = connection.execute(
            "SELECT DISTINCT pg_get_userbyid(relowner) FROM pg_class WHERE relnamespace = 'public'::regnamespace"
        ).fetchall()
        assert tables == [(service_database.owner,)]
        for statement in (
            "CREATE TABLE trespass (id int)",
            "CREATE TEMPORARY TABLE trespass (id int)",
            "CREATE FUNCTION trespass() RETURNS int LANGUAGE sql AS 'SELECT 1'",
            "CREATE SCHEMA trespass",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                connection.execute(statement)
        if service_database.runs_consumer_runtime:
            connection.execute("SELECT count(*) FROM processed_message").fetchone()
            connection.execute("SELECT processed_message_day(current_date + 1)")  # the owner's function


def test_a_service_role_cannot_connect_to_another_service_database(settings: Settings) -> None:
    orders, inventory = database("orders"), database("inventory")
    trespass = with_credentials(
        settings.admin_database_url, orders.role, settings.database_password(orders), inventory.name
    )
    with pytest.raises(psycopg.OperationalError, match="permission denied"):
        psycopg.connect(trespass).close()


def test_a_service_role_is_not_a_superuser_and_cannot_create_databases(settings: Settings) -> None:
    orders = database("orders")
    with psycopg.connect(settings.service_database_url(orders), autocommit=True) as connection:
        flags = connection.execute(
            "SELECT rolsuper, rolcreatedb, rolcreaterole FROM pg_roles WHERE rolname = current_user"
        ).fetchone()
        assert flags == (False, False, False)
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            connection.execute(f"CREATE DATABASE trespass_{uuid.uuid4().hex[:8]}")


def test_the_auditor_reads_every_service_table_and_writes_none(settings: Settings) -> None:
    inventory = database("inventory")
    with psycopg.connect(settings.auditor_database_url(inventory)) as connection:
        connection.execute("SELECT count(*) FROM processed_message").fetchone()
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            connection.execute(
                "INSERT INTO processed_message (consumer_name, message_id, id_time) VALUES ('x', 'y', '-infinity')"
            )


def test_the_marker_table_refuses_empty_and_duplicate_keys(settings: Settings) -> None:
    url = settings.service_database_url(database("payment"))
    consumer, message = f"provisioning-test-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    with psycopg.connect(url, autocommit=True) as connection:
        insert = (
            "INSERT INTO processed_message (consumer_name, message_id, id_time) VALUES (%s, %s, message_id_time(%s))"
        )
        connection.execute(insert, (consumer, message, message))
        with pytest.raises(psycopg.errors.UniqueViolation):
            connection.execute(insert, (consumer, message, message))
        with pytest.raises(psycopg.errors.CheckViolation):
            connection.execute(insert, (consumer, "", ""))
        with pytest.raises(psycopg.errors.CheckViolation):
            connection.execute(insert, (consumer, "m" * 256, "m" * 256))


def test_every_topic_exists_with_enough_partitions_and_every_consumer_has_a_dead_letter_topic(
    settings: Settings,
) -> None:
    metadata = AdminClient(client_config(settings.kafka_bootstrap_servers)).list_topics(timeout=10)
    for topic in all_topics():
        assert topic in metadata.topics, topic
        assert len(metadata.topics[topic].partitions) >= TOPIC_PARTITIONS, topic
    for consumer in CONSUMERS:
        assert consumer.dead_letter_topic in metadata.topics
