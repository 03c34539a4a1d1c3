"""A database of its own with the runtime's tables, read by a Kafka Connect worker of its own,
rendered from the launcher's templates: for the Debezium relay's tests and its bake-off bench."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psycopg
from psycopg import sql

from effectively_once import schema
from infra.launcher import kafka_connect
from infra.launcher.kafka_broker import LOG4J_CONFIG, ensure_topics
from infra.launcher.preflight import require_java
from outbox_relay import debezium
from services.kafka_access import ADMIN
from services.settings import Settings
from services.topology import cdc_connector, cdc_heartbeat_topic, cdc_slot
from workbench.network import free_port


@dataclass
class Cdc:
    name: str
    url: str
    rest_port: int
    command: list[str]
    log: Path
    worker: subprocess.Popen[bytes] | None = field(default=None)

    @property
    def slot(self) -> str:
        return cdc_slot(self.name)

    def start(self, timeout: float = 180) -> None:
        """Start the worker (again: it resumes from its offsets file) and wait until it streams."""
        with self.log.open("ab") as output:
            self.worker = subprocess.Popen(self.command, stdout=output, stderr=subprocess.STDOUT)
        worker = self.worker

        def alive() -> None:
            if worker.poll() is not None:
                raise AssertionError(f"the Connect worker exited: {self.log.read_text()[-3000:]}")

        kafka_connect.wait_until_running(self.rest_port, timeout, alive, [self.name])

    def kill(self) -> None:
        """SIGKILL: no offsets flushed on the way out."""
        if self.worker is not None:
            self.worker.kill()
            self.worker.wait()
            self.worker = None

    def connector(self, action: str) -> None:
        """`pause` or `resume` the connector through the worker's REST API."""
        url = f"http://127.0.0.1:{self.rest_port}/connectors/{cdc_connector(self.name)}/{action}"
        httpx.put(url, timeout=10).raise_for_status()


@contextmanager
def cdc_database(settings: Settings, directory: Path, heap: str = "256m") -> Iterator[Cdc]:
    """A fresh database migrated as a service's, its replication role, slot and heartbeat topic, and
    a running worker as the admin principal (a super user: a test's topics are in no ACL); all
    removed afterwards."""
    name = f"cdc_{uuid.uuid4().hex[:8]}"
    role, password = f"{name}_reader", uuid.uuid4().hex
    admin_url = settings.admin_database_url
    url = kafka_connect.database_url(admin_url, name)
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        admin.execute(
            sql.SQL("CREATE ROLE {} LOGIN REPLICATION PASSWORD {}").format(sql.Identifier(role), sql.Literal(password))
        )
    try:
        with psycopg.connect(url, autocommit=True) as connection:
            schema.migrate(connection)
            connection.execute(sql.SQL("GRANT SELECT ON outbox TO {}").format(sql.Identifier(role)))
            grant = sql.SQL("GRANT INSERT, DELETE ON outbox_cdc_heartbeat TO {}")
            connection.execute(grant.format(sql.Identifier(role)))
        kafka_connect.ensure_slot(url, cdc_slot(name))
        ensure_topics(settings.kafka_bootstrap_servers, (cdc_heartbeat_topic(name),))
        port = free_port()
        principal = settings.kafka_principal(ADMIN)
        worker = debezium.render_worker(directory, settings.kafka_bootstrap_servers, principal, port)
        connector = debezium.render_connector(directory, admin_url, name, role, password)
        libs = kafka_connect.ensure_jars(settings, print)
        command = debezium.java_command(require_java(None), libs, heap, worker, [connector], LOG4J_CONFIG)
        cdc = Cdc(name, url, port, command, directory / "worker.log")
        try:
            cdc.start()
            yield cdc
        finally:
            cdc.kill()
    finally:
        with psycopg.connect(admin_url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
                (cdc_slot(name),),
            )
            admin.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
            admin.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
