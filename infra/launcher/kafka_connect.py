"""Kafka Connect with Debezium's PostgreSQL connector: the second relay (RELAY=debezium).

The jars come from Maven Central through infra/connect/pom.xml, cached like the broker's. The
launcher renders the standalone worker's properties and one connector per service database from
the templates beside that pom, into the state directory (they hold passwords: mode 0600), and
runs the worker under the supervisor. Each connector reads its database through a replication
role of its own, from a slot made before any service writes (`ensure_slots`), so nothing written
is missed and no snapshot is needed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from string import Template
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg

from effectively_once.kafka_client import KafkaPrincipal
from infra.launcher import kafka_broker, maven_jars
from infra.launcher.errors import LaunchError
from services.connect_status import connector_state
from services.kafka_access import CDC
from services.settings import PROJECT_ROOT, Settings
from services.topology import CDC_SLOT_PREFIX, DATABASES, ServiceDatabase, cdc_connector, cdc_heartbeat_topic, cdc_slot

CONNECT_DIR = PROJECT_ROOT / "infra" / "connect"
POM = CONNECT_DIR / "pom.xml"
WORKER_TEMPLATE = CONNECT_DIR / "worker.properties.template"
CONNECTOR_TEMPLATE = CONNECT_DIR / "outbox-connector.properties.template"
MAIN_CLASS = "org.apache.kafka.connect.cli.ConnectStandalone"


def outbox_databases() -> list[ServiceDatabase]:
    """The databases with an outbox: one connector, one slot and one replication role each."""
    return [database for database in DATABASES if database.runs_consumer_runtime]


def heartbeat_topics() -> tuple[str, ...]:
    """Each connector's heartbeat topic, made by the launcher (the worker makes no topic)."""
    return tuple(cdc_heartbeat_topic(database.name) for database in outbox_databases())


def ensure_jars(settings: Settings, say: Callable[[str], None]) -> Path:
    return maven_jars.ensure(settings, POM, "connect", "Kafka Connect and Debezium", say)


def state_dir(settings: Settings) -> Path:
    return settings.EO_STATE_DIR / "kafka-connect"


def _write_secret(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.touch(mode=0o600)
    path.chmod(0o600)
    path.write_text(text)
    return path


def render_worker(
    directory: Path,
    bootstrap_servers: str,
    principal: KafkaPrincipal,
    rest_port: int,
    offsets: Path | None = None,
    rest_host: str = "127.0.0.1",
) -> Path:
    """Render a standalone worker's configuration into `directory`; its offsets file is `offsets`,
    by default beside it. Its REST API (no authentication) listens on loopback unless `rest_host`
    says otherwise (compose: the panel's container reaches it on the network)."""
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="{principal.username}" password="{principal.password}";'
    )
    rendered = Template(WORKER_TEMPLATE.read_text()).substitute(
        BOOTSTRAP_SERVERS=bootstrap_servers,
        SECURITY_PROTOCOL=principal.protocol,
        SASL_MECHANISM=principal.mechanism,
        JAAS=jaas,
        OFFSETS_FILE=offsets or directory / "offsets",
        REST_PORT=rest_port,
        REST_HOST=rest_host,
    )
    return _write_secret(directory / "worker.properties", rendered)


def render_connector(directory: Path, database_url: str, database_name: str, user: str, password: str) -> Path:
    """Render the outbox connector of `database_name`, on `database_url`'s server, into `directory`."""
    server = urlsplit(database_url)
    rendered = Template(CONNECTOR_TEMPLATE.read_text()).substitute(
        DATABASE=database_name,
        DB_HOST=server.hostname or "127.0.0.1",
        DB_PORT=server.port or 5432,
        DB_USER=user,
        DB_PASSWORD=password,
    )
    return _write_secret(directory / f"{cdc_connector(database_name)}.properties", rendered)


def java_command(java: str, libs: Path, heap: str, worker: Path, connectors: list[Path]) -> list[str]:
    """A standalone worker's command line, as bin/connect-standalone.sh would build it."""
    return [
        java,
        f"-Xms{heap}",
        f"-Xmx{heap}",
        "-XX:+UseG1GC",
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={kafka_broker.LOG4J_CONFIG}",
        "-cp",
        f"{libs}/*",
        MAIN_CLASS,
        str(worker),
        *(str(connector) for connector in connectors),
    ]


def render(
    settings: Settings, directory: Path, offsets: Path | None = None, rest_host: str = "127.0.0.1"
) -> tuple[Path, list[Path]]:
    """The platform's worker, as the `outbox-cdc` principal, and one connector per outbox database
    through that database's replication role, rendered into `directory` (the state directory, or
    under docker-compose the Connect container's own: `python -m infra.launcher connect-worker`)."""
    worker = render_worker(
        directory,
        settings.kafka_bootstrap_servers,
        settings.kafka_principal(CDC),
        settings.KAFKA_CONNECT_PORT,
        offsets,
        rest_host,
    )
    connectors = [
        render_connector(
            directory, settings.admin_database_url, database.name, database.cdc_role, settings.cdc_password(database)
        )
        for database in outbox_databases()
    ]
    return worker, connectors


def command(java: str, libs: Path, settings: Settings) -> list[str]:
    """The launcher's worker, rendered into the state directory."""
    worker, connectors = render(settings, state_dir(settings))
    return java_command(java, libs, settings.KAFKA_CONNECT_HEAP, worker, connectors)


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
    parts = urlsplit(admin_database_url)
    name = database if isinstance(database, str) else database.name
    return urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, ""))
