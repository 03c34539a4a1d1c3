"""Kafka Connect with Debezium's PostgreSQL connector, as the launcher runs it (RELAY=debezium).

The jars come from Maven Central through outbox_relay/debezium/pom.xml, cached like the
broker's. The launcher renders the worker and its connectors into the state directory
(`outbox_relay.debezium.render`) and runs the worker under the supervisor. Each connector reads
its database through a replication role of its own, from a slot made before any service writes
(`ensure_slots`), so nothing written is missed and no snapshot is needed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import httpx
import psycopg

from infra.launcher import kafka_broker, maven_jars
from infra.launcher.errors import LaunchError
from outbox_relay import debezium
from outbox_relay.wiring import outbox_databases
from services.connect_status import connector_state
from services.settings import Settings, with_database
from services.topology import CDC_SLOT_PREFIX, ServiceDatabase, cdc_connector, cdc_heartbeat_topic, cdc_slot


def heartbeat_topics() -> tuple[str, ...]:
    """Each connector's heartbeat topic, made by the launcher (the worker makes no topic)."""
    return tuple(cdc_heartbeat_topic(database.name) for database in outbox_databases())


def ensure_jars(settings: Settings, say: Callable[[str], None]) -> Path:
    return maven_jars.ensure(settings, debezium.POM, "connect", "Kafka Connect and Debezium", say)


def state_dir(settings: Settings) -> Path:
    return settings.EO_STATE_DIR / "kafka-connect"


def command(java: str, libs: Path, settings: Settings) -> list[str]:
    """The launcher's worker, rendered into the state directory."""
    worker, connectors = debezium.render(settings, state_dir(settings))
    heap = settings.KAFKA_CONNECT_HEAP
    options = settings.KAFKA_JVM_OPTIONS.split()
    return debezium.java_command(java, libs, heap, worker, connectors, kafka_broker.LOG4J_CONFIG, options)


def prepare_database(settings: Settings) -> list[str]:
    """What the connectors need before they start: logical decoding, each database's slot (made
    before any service writes) and each heartbeat topic. Returns the slots made now."""
    require_logical_decoding(settings.admin_database_url)
    kafka_broker.ensure_topics(settings.kafka_bootstrap_servers, heartbeat_topics())
    return ensure_slots(settings.admin_database_url)


def ensure_slot(database_url: str, slot: str) -> bool:
    """Make the logical replication slot `slot` (pgoutput) in `database_url`'s database unless it
    exists; True when made. Made before any service writes, a slot keeps every insert from then on
    for its connector, however late the connector starts. `database_url` names a superuser."""
    with psycopg.connect(database_url, autocommit=True) as connection:
        if connection.execute("SELECT 1 FROM pg_replication_slots WHERE slot_name = %s", (slot,)).fetchone():
            return False
        connection.execute("SELECT pg_create_logical_replication_slot(%s, 'pgoutput')", (slot,))
    return True


def leftover_slots(admin_database_url: str) -> list[str]:
    """The outbox slots on the server, whichever relay runs now: under the built-in relay, each is
    left from RELAY=debezium and keeps write-ahead log until dropped."""
    with psycopg.connect(admin_database_url, autocommit=True) as connection:
        rows = connection.execute(
            "SELECT slot_name FROM pg_replication_slots WHERE starts_with(slot_name, %s) ORDER BY 1",
            (CDC_SLOT_PREFIX,),
        ).fetchall()
    return [str(row[0]) for row in rows]


def ensure_slots(admin_database_url: str) -> list[str]:
    """Every outbox database's slot (`ensure_slot`); the names of those made now."""
    return [
        cdc_slot(database.name)
        for database in outbox_databases()
        if ensure_slot(database_url(admin_database_url, database), cdc_slot(database.name))
    ]


def connector_states(rest_port: int) -> dict[str, str]:
    """Connector name -> its state ("RUNNING", "PAUSED", "FAILED: <trace's first line>", ...), from
    the worker's REST API (services/connect_status.py); empty while the worker does not answer."""
    try:
        answer = httpx.get(f"http://127.0.0.1:{rest_port}/connectors?expand=status", timeout=2)
        answer.raise_for_status()
    except httpx.HTTPError:
        return {}
    states = {}
    for name, detail in answer.json().items():
        state, why = connector_state(detail.get("status") or {})
        states[name] = f"{state}: {why}" if state == "FAILED" else state
    return states


def wait_until_running(
    rest_port: int, timeout: float, still_starting: Callable[[], None], databases: list[str] | None = None
) -> None:
    """Return once the connector of each of `databases` (by default every outbox database) and its
    task run; a LaunchError naming the connector and the first line of its trace when one failed,
    or when time ran out."""
    names = databases if databases is not None else [database.name for database in outbox_databases()]
    wanted = {cdc_connector(name) for name in names}
    deadline = time.monotonic() + timeout
    states: dict[str, str] = {}
    while time.monotonic() < deadline:
        still_starting()
        states = connector_states(rest_port)
        failed = {name: state for name, state in states.items() if state.startswith("FAILED")}
        if failed:
            raise LaunchError(
                "Debezium's connector failed: " + "; ".join(f"{name}: {state}" for name, state in failed.items()),
                "read kafka-connect's log (`make logs`); `curl localhost:"
                f"{rest_port}/connectors?expand=status` shows each connector's state",
            )
        if wanted <= {name for name, state in states.items() if state == "RUNNING"}:
            return
        time.sleep(0.5)
    waiting = ", ".join(f"{name}: {states.get(name, 'not there yet')}" for name in sorted(wanted))
    raise LaunchError(
        f"Debezium's connectors did not all run within {timeout:.0f} s ({waiting})",
        "read kafka-connect's log (`make logs`)",
    )


def require_logical_decoding(admin_database_url: str) -> None:
    """A LaunchError unless the server decodes its write-ahead log logically (wal_level=logical)."""
    with psycopg.connect(admin_database_url, autocommit=True) as connection:
        level = connection.execute("SHOW wal_level").fetchone()
    if not level or level[0] != "logical":
        raise LaunchError(
            f"RELAY=debezium needs PostgreSQL's wal_level=logical; the server runs with {level[0] if level else '?'}",
            "`make down` and `make up RELAY=debezium` (the launcher's cluster starts with it); on your own "
            "server, set wal_level=logical and restart it",
        )


def database_url(admin_database_url: str, database: ServiceDatabase | str) -> str:
    """The admin's URL to `database` instead of its own."""
    return with_database(admin_database_url, database if isinstance(database, str) else database.name)
