"""Debezium's PostgreSQL connector in Kafka Connect: the relay's alternative (RELAY=debezium).

The jars come from Maven Central through `pom.xml` beside this file. The worker's properties and
one connector per outbox database are rendered from the templates beside it (they hold
passwords: mode 0600): natively by the launcher into its state directory, under docker-compose
by the Connect container itself (`python -m outbox_relay connect-worker`). Each connector reads
its database through a replication role of its own, from a slot made before any service writes,
so nothing written is missed and no snapshot is needed.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from string import Template

from effectively_once.kafka_client import KafkaPrincipal
from services.kafka_access import CDC
from services.settings import Settings, database_hosts
from services.topology import cdc_connector

from ..wiring import outbox_databases

HERE = Path(__file__).resolve().parent
POM = HERE / "pom.xml"
WORKER_TEMPLATE = HERE / "worker.properties.template"
CONNECTOR_TEMPLATE = HERE / "outbox-connector.properties.template"
MAIN_CLASS = "org.apache.kafka.connect.cli.ConnectStandalone"


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
    host, port = database_hosts(database_url)[0]
    rendered = Template(CONNECTOR_TEMPLATE.read_text()).substitute(
        DATABASE=database_name,
        DB_HOST=host,
        DB_PORT=port,
        DB_USER=user,
        DB_PASSWORD=password,
    )
    return _write_secret(directory / f"{cdc_connector(database_name)}.properties", rendered)


def java_command(
    java: str,
    libs: Path,
    heap: str,
    worker: Path,
    connectors: list[Path],
    log4j_config: Path | None = None,
    options: Sequence[str] = ("-XX:+UseG1GC",),
) -> list[str]:
    """A standalone worker's command line, as bin/connect-standalone.sh would build it; `options`
    are the JVM's flags besides the heap."""
    logging = [f"-Dlog4j2.configurationFile={log4j_config}"] if log4j_config is not None else []
    return [
        java,
        f"-Xms{heap}",
        f"-Xmx{heap}",
        *options,
        "-Djava.awt.headless=true",
        *logging,
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
    through that database's replication role, rendered into `directory` (the launcher's state
    directory, or under docker-compose the Connect container's own)."""
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
