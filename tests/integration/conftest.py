"""Fixtures for the runtime's integration tests: a database of their own, topics of their own."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import httpx
import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from effectively_once import lab, schema
from effectively_once.consumer.processor import (
    BulkHandler,
    Handler,
    MessageProcessor,
    ProcessorConfig,
    path_for,
)
from effectively_once.faults import FaultPoints
from effectively_once.outcomes import Strategy
from infra.launcher.kafka_broker import ensure_topics
from services.sandbox_admin import admin_headers
from services.settings import PROJECT_ROOT, Settings, with_credentials
from tests.support.kafka_nodes import KafkaNodes, three_kafka_nodes
from tests.support.migration_files import apply_files
from tests.support.outbox import new_outbox
from tests.support.sandboxes import ADMIN_PASSWORD, running
from workbench.ledger import SCHEMA

RUNTIME_TESTS_DATABASE = "runtime_tests"


@pytest.fixture(scope="session")
def runtime_db(settings: Settings) -> str:
    """The URL of a database holding the runtime's tables and the test domain's."""
    admin_url = settings.admin_database_url
    with psycopg.connect(admin_url, autocommit=True) as admin:
        exists = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", (RUNTIME_TESTS_DATABASE,)).fetchone()
        if not exists:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(RUNTIME_TESTS_DATABASE)))
    parts = urlsplit(admin_url)
    url = with_credentials(admin_url, parts.username or "postgres", parts.password or "", RUNTIME_TESTS_DATABASE)
    with psycopg.connect(url, autocommit=True) as connection:
        schema.migrate(connection)  # each migration once, as a service's database receives them
        with connection.transaction():
            connection.execute("SELECT pg_advisory_xact_lock(%s)", (schema.LOCK,))
            connection.execute(SCHEMA)
    return url


@pytest.fixture(scope="module")
def kafka_nodes() -> Iterator[KafkaNodes]:
    """Three Kafka nodes of the tests' own (tests/support/kafka_nodes.py) for a module whose tests
    freeze or kill one (each such test starts again first any node one before it killed); stopped
    with the module, so that three more JVMs do not share the machine with the tests after it."""
    with three_kafka_nodes() as running:
        yield running


@pytest.fixture
def name() -> str:
    """A consumer name no other test uses."""
    return f"test-consumer-{uuid.uuid4().hex[:10]}-v1"


@dataclass
class Topics:
    events: str
    dead_letters: str


@pytest.fixture
def topics(settings: Settings) -> Topics:
    run = uuid.uuid4().hex[:10]
    created = Topics(f"test.events.{run}", f"test.dlq.{run}")
    ensure_topics(settings.kafka_bootstrap_servers, (created.events, created.dead_letters))
    return created


ProcessorFactory = Callable[..., MessageProcessor]


@pytest.fixture
def make_processor(runtime_db: str) -> Iterator[ProcessorFactory]:
    """Builds processors on their own connections; closes them after the test."""
    made: list[MessageProcessor] = []

    def make(
        consumer_name: str,
        handlers: dict[str, Handler],
        faults: FaultPoints | None = None,
        bulk_handlers: dict[str, BulkHandler] | None = None,
        database_url: str | None = None,
        **config: Any,
    ) -> MessageProcessor:
        processor = MessageProcessor(
            ProcessorConfig(consumer_name=consumer_name, backoff_base_seconds=0.001, **config),
            connect=lambda: psycopg.connect(database_url or runtime_db),
            handlers=handlers,
            faults=faults,
            bulk_handlers=bulk_handlers,
            path=path_for(config.get("strategy", Strategy.CORRECT), lab.PATHS),
        )
        made.append(processor)
        return processor

    yield make
    for processor in made:
        processor.close()


def isolated_schema(runtime_db: str, *migrations: Path, as_url: bool = False) -> str:
    """A new schema in the runtime tests' database with these migrations applied; its conninfo
    (a `postgresql://` URL with `as_url`, which every stack's driver reads) sets search_path to
    it, so the service's unqualified SQL runs there and nowhere else."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(runtime_db, autocommit=True) as connection:
        connection.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        connection.execute(sql.SQL("SET search_path = {}").format(sql.Identifier(schema)))
        apply_files(connection, migrations)
    if as_url:
        return f"{runtime_db}{'&' if '?' in runtime_db else '?'}options={quote(f'-c search_path={schema}')}"
    return make_conninfo(runtime_db, options=f"-c search_path={schema}")


def service_schema(runtime_db: str, service: str, as_url: bool = False) -> str:
    """A schema holding the runtime's tables and `service`'s own, as its database has them."""
    own = sorted((PROJECT_ROOT / "services" / service / "migrations").glob("*.sql"))
    return isolated_schema(runtime_db, *sorted(schema.MIGRATIONS.glob("*.sql")), *own, as_url=as_url)


@dataclass
class Sandbox:
    client: httpx.Client
    database_url: str
    """Its schema of its own in the runtime tests' database: the demo's ledgers stay untouched."""


@pytest.fixture(scope="module")
def provider(runtime_db: str) -> Iterator[Sandbox]:
    """The payment-provider sandbox as a real process, on a schema of its own."""
    url = isolated_schema(runtime_db, *sorted((PROJECT_ROOT / "services/payment_provider/migrations").glob("*.sql")))
    with (
        running("services.payment_provider", url, "PAYMENT_PROVIDER_HOST", "PAYMENT_PROVIDER_PORT") as base,
        httpx.Client(base_url=base, timeout=10, headers=admin_headers(ADMIN_PASSWORD)) as client,
    ):
        yield Sandbox(client, url)
        client.delete("/admin/faults")


@pytest.fixture(scope="module")
def mail(runtime_db: str) -> Iterator[Sandbox]:
    """The mail sandbox as a real process, on a schema of its own."""
    url = isolated_schema(runtime_db, *sorted((PROJECT_ROOT / "services/mail/migrations").glob("*.sql")))
    with (
        running("services.mail", url, "MAIL_HOST", "MAIL_PORT") as base,
        httpx.Client(base_url=base, timeout=10, headers=admin_headers(ADMIN_PASSWORD)) as client,
    ):
        yield Sandbox(client, url)


@pytest.fixture
def outbox_url(runtime_db: str) -> str:
    """A schema of this test's own holding an outbox, reached through search_path."""
    return new_outbox(runtime_db)
