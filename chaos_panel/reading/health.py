"""Whether the platform's infrastructure answers: each service database and the Kafka cluster."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

import psycopg
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from effectively_once.kafka_client import client_config
from services.settings import with_credentials
from services.topology import DATABASES, all_topics


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


def per_database(auditor_url: str, name: str) -> str:
    """The auditor's URL (which names any one database) for the database called `name`."""
    parts = urlsplit(auditor_url)
    return with_credentials(auditor_url, parts.username or "", parts.password or "", name)


def database_checks(auditor_url: str | None) -> list[Check]:
    """One check per service database, connecting as the read-only auditor."""
    if not auditor_url:
        return [Check("databases", False, "DATABASE_URL is not set")]
    checks = []
    for database in DATABASES:
        url = per_database(auditor_url, database.name)
        try:
            with psycopg.connect(url, connect_timeout=2) as connection:
                tables = connection.execute(
                    "SELECT count(*) FROM information_schema.tables WHERE table_schema = 'public'"
                ).fetchone()
            checks.append(
                Check(
                    f"database {database.name}",
                    True,
                    f"answers; {tables[0] if tables else 0} tables",
                )
            )
        except psycopg.Error as error:
            first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
            checks.append(Check(f"database {database.name}", False, first_line))
    return checks


def kafka_check(bootstrap_servers: str) -> Check:
    """The broker answers a metadata request, and every platform topic exists."""
    admin = AdminClient({**client_config(bootstrap_servers), "log_level": 0})
    try:
        metadata = admin.list_topics(timeout=3)
    except KafkaException as error:
        return Check("kafka", False, str(error))
    missing = [topic for topic in all_topics() if topic not in metadata.topics]
    if missing:
        return Check("kafka", False, "missing topics: " + ", ".join(missing))
    return Check("kafka", True, f"{len(metadata.brokers)} broker(s), {len(all_topics())} topics")
