"""`up`, `down` and `status` of the native stack: PostgreSQL, Kafka and the platform's processes."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from effectively_once.kafka_client import principal_from_environment
from infra.launcher import (
    inventory_implementations,
    kafka_broker,
    kafka_connect,
    kafka_principals,
    postgres_cluster,
    postgres_pair,
    processes,
    prometheus_server,
    provisioning,
)
from infra.launcher.errors import LaunchError
from infra.launcher.preflight import require_free_port, require_java
from infra.launcher.supervisor import Program, Supervisor
from services.kafka_access import ADMIN, PRINCIPALS
from services.settings import Settings, redact

Say = Callable[[str], None]
FAILED_STATES = ("BACKOFF", "FATAL", "EXITED")


@dataclass(frozen=True)
class Endpoints:
    """Where the running infrastructure answers."""

    admin_database_url: str
    kafka_bootstrap_servers: str


def _tail(path: os.PathLike[str] | str, lines: int = 25) -> str:
    try:
        with open(path, errors="replace") as log:
            return "".join(log.readlines()[-lines:])
    except OSError:
        return "(no log yet)"


def _watch(supervisor: Supervisor, name: str) -> Callable[[], None]:
    """A callback that fails fast when `name` died while we wait for it to be ready."""

    def check() -> None:
        state = supervisor.info(name)["statename"]
        if state in FAILED_STATES:
            raise LaunchError(
                f"{name} exited while starting ({state}); the end of its log:\n" + _tail(supervisor.log_path(name)),
                f"fix what the log says, then `make up` again (whole log: {supervisor.log_path(name)})",
            )

    return check


def _watch_all(supervisor: Supervisor, names: list[str]) -> Callable[[], None]:
    checks = [_watch(supervisor, name) for name in names]

    def check() -> None:
        for each in checks:
            each()

    return check


def _refuse_another_kafka_topology(supervisor: Supervisor, settings: Settings) -> None:
    """A running system keeps its Kafka nodes: BROKERS changes on a stopped system only."""
    if not supervisor.is_running():
        return
    running = {info["name"] for info in supervisor.all_info() if kafka_broker.is_node_name(info["name"])}
    wanted = set(kafka_broker.node_names(settings))
    if running and running != wanted:
        raise LaunchError(
            f"this system runs Kafka as {', '.join(sorted(running))}, not the {settings.BROKERS} node(s) of BROKERS",
            "`make down` first; the new cluster starts empty beside the old one's data: change with no order in flight",
        )


def _refuse_another_postgres_topology(supervisor: Supervisor, settings: Settings) -> None:
    """A running system keeps its PostgreSQL nodes; a stopped one starts a single server only from
    the node that was the primary."""
    if supervisor.is_running():
        running = {info["name"] for info in supervisor.all_info() if postgres_cluster.is_node_name(info["name"])}
        if running and running != set(postgres_cluster.node_names(settings)):
            raise LaunchError(
                f"this system runs PostgreSQL as {', '.join(sorted(running))}, not POSTGRES={settings.POSTGRES}",
                "`make down` first, then `make up POSTGRES=single` or `POSTGRES=ha`",
            )
    if settings.POSTGRES == "single" and postgres_pair.primary_node(settings) != 1:
        raise LaunchError(
            "node 1's data is a standby since a failover: the primary's data is node 2's",
            "run `make up POSTGRES=ha` (or move node 2's data directory into node 1's place yourself)",
        )


def _refuse_another_relay(supervisor: Supervisor, settings: Settings) -> None:
    """A running system keeps its relay: RELAY changes on a stopped system only, because each
    switch has a step of its own (docs/debezium-relay.md#switching-relays)."""
    if not supervisor.is_running():
        return
    names = {info["name"] for info in supervisor.all_info()}
    if processes.OUTBOX_RELAY not in names:
        return  # no platform yet (the tests' shared infrastructure): nothing relays
    running = "debezium" if processes.KAFKA_CONNECT in names else "builtin"
    if running != settings.RELAY:
        raise LaunchError(
            f"this system runs RELAY={running}, not RELAY={settings.RELAY}",
            f"`make up RELAY={running}` keeps it; to switch, `make down` first and follow "
            "docs/debezium-relay.md#switching-relays (drain the outbox, or drop the slots)",
        )


def _port_variable(program: Program, port: int) -> str:
    names = {
        processes.POSTGRES: "POSTGRES_PORT",
        "postgres-1": "POSTGRES_PORT",
        "postgres-2": "POSTGRES_PORT (node 2 listens on POSTGRES_PORT + 1)",
        processes.CHAOS_PANEL: "CHAOS_PANEL_PORT",
        processes.ORDERS_API: "ORDERS_API_PORT",
        processes.PAYMENT_PROVIDER: "PAYMENT_PROVIDER_PORT",
        processes.MAIL: "MAIL_PORT",
        processes.KAFKA_CONNECT: "KAFKA_CONNECT_PORT",
    }
    if kafka_broker.is_node_name(program.name):
        return "KAFKA_PORT or KAFKA_CONTROLLER_PORT"
    return names.get(program.name, "CONTROL_PORT_BASE")


def _wait_healthy(supervisor: Supervisor, program: Program, timeout: float = 120) -> None:
    if not program.health_url:
        return
    still_starting = _watch(supervisor, program.name)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        still_starting()
        try:
            if httpx.get(program.health_url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise LaunchError(
        f"{program.name} did not become healthy at {program.health_url}",
        f"read its log: {supervisor.log_path(program.name)}",
    )


def _start_postgres(bindir: Path, settings: Settings, supervisor: Supervisor, say: Say) -> None:
    """The single server, or the primary and its streaming standby (POSTGRES=ha)."""
    if settings.POSTGRES == "ha":
        postgres_pair.start_pair(bindir, settings, supervisor, say, lambda name: _watch(supervisor, name))
    else:
        supervisor.start(processes.POSTGRES)
    watch = _watch_all(supervisor, postgres_cluster.node_names(settings))
    postgres_cluster.wait_until_ready(settings.admin_database_url, 60, watch)


def up(settings: Settings, say: Say, with_platform: bool = True) -> Endpoints:
    """Bring the stack up (idempotent); return where PostgreSQL and Kafka answer.

    Every check that can fail on configuration runs before anything starts.
    """
    settings.EO_STATE_DIR.mkdir(parents=True, exist_ok=True, mode=0o755)
    act_as_admin(settings)
    supervisor = Supervisor(settings.EO_STATE_DIR)
    running = (  # a program the supervisor is starting again (after a crash) holds its own ports
        {info["name"] for info in supervisor.all_info() if info["statename"] in ("RUNNING", "STARTING")}
        if supervisor.is_running()
        else set()
    )
    infrastructure: list[Program] = []
    if settings.uses_own_postgres:
        bindir = postgres_cluster.ensure_installed(say)
        _refuse_another_postgres_topology(supervisor, settings)
        infrastructure.extend(processes.postgres_programs(settings, bindir))
    else:
        postgres_cluster.wait_until_ready(settings.admin_database_url, timeout=5)
    if settings.uses_own_kafka:
        java = require_java(settings.JAVA_HOME)
        libs = kafka_broker.ensure_jars(settings, say)
        kafka_broker.ensure_class_archive(java, libs, settings, say)
        _refuse_another_kafka_topology(supervisor, settings)
        infrastructure.extend(processes.kafka_programs(settings, java, libs))
    else:
        kafka_broker.wait_until_ready(settings.kafka_bootstrap_servers, timeout=15)
    connect: list[Program] = []  # RELAY=debezium's worker: started once the slots exist
    if with_platform:
        _refuse_another_relay(supervisor, settings)
    if with_platform and settings.RELAY == "debezium":
        java = require_java(settings.JAVA_HOME)
        connect.append(processes.kafka_connect_program(settings, java, kafka_connect.ensure_jars(settings, say)))
    if with_platform:
        inventory_implementations.build(settings.INVENTORY_IMPL, say)
        prometheus_server.ensure_installed(say)
        prometheus_server.write_config(settings, processes.scrape_targets(settings))
    all_platform = processes.platform_programs(settings, run_id=_run_id(settings, fresh=not supervisor.is_running()))
    platform = all_platform if with_platform else []
    for program in infrastructure + connect + platform:
        if program.name not in running:
            for port in program.ports:
                require_free_port("127.0.0.1", port, program.name, _port_variable(program, port))

    if settings.uses_own_postgres:
        postgres_cluster.ensure_initialised(bindir, settings, say, node=postgres_pair.primary_node(settings))
    if settings.uses_own_kafka:
        kafka_broker.ensure_formatted(java, libs, settings, say)
    supervisor.start_daemon(infrastructure + connect + all_platform)
    for program in infrastructure:
        say(f"{program.name} is running" if program.name in running else f"starting {program.name}")
    if settings.uses_own_postgres:
        _start_postgres(bindir, settings, supervisor, say)
    kafka_nodes = [program.name for program in infrastructure if not postgres_cluster.is_node_name(program.name)]
    for name in kafka_nodes:
        supervisor.start(name)
    watch_kafka = _watch_all(supervisor, kafka_nodes)
    if kafka_nodes:
        kafka_broker.wait_until_ready(settings.kafka_bootstrap_servers, 90, watch_kafka, brokers=len(kafka_nodes))
    provisioning.provision(settings, say)
    created = kafka_broker.ensure_topics(settings.kafka_bootstrap_servers)
    kafka_broker.ensure_share_groups(settings.kafka_bootstrap_servers, lock_seconds=settings.SHARE_LOCK_SECONDS)
    if created:
        say(f"created {len(created)} topics")
    if kafka_principals.ensure_principals(settings.kafka_bootstrap_servers, settings):
        say(f"gave each of {len(PRINCIPALS)} Kafka principals its ACLs")
    if settings.uses_own_kafka and settings.kafka_replication_factor > 1:
        say(f"waiting for every partition's {settings.kafka_replication_factor} in-sync replicas")
        kafka_broker.wait_until_replicated(
            settings.kafka_bootstrap_servers, settings.kafka_replication_factor, 120, still_starting=watch_kafka
        )
    for program in connect:
        made = kafka_connect.prepare_database(settings)
        if made:
            say(f"made replication slots {', '.join(made)}")
        say(f"{program.name} is running" if program.name in running else f"starting {program.name}")
        supervisor.start(program.name)
        kafka_connect.wait_until_running(settings.KAFKA_CONNECT_PORT, 120, _watch(supervisor, program.name))
    if with_platform and settings.RELAY == "builtin":
        for slot in kafka_connect.leftover_slots(settings.admin_database_url):
            say(
                f"warning: replication slot {slot} remains from RELAY=debezium and keeps write-ahead log; "
                "drop it as docs/debezium-relay.md#switching-relays says"
            )
    for program in platform:  # all at once, then each waited for
        say(f"{program.name} is running" if program.name in running else f"starting {program.name}")
        supervisor.start(program.name, wait=False)
    for program in platform:
        _wait_healthy(supervisor, program)
    return Endpoints(settings.admin_database_url, settings.kafka_bootstrap_servers)


def prepare(settings: Settings, say: Say) -> None:
    """Install or fetch everything `up` would (each only once, then cached), starting nothing."""
    if settings.uses_own_postgres:
        postgres_cluster.ensure_installed(say)
    if settings.uses_own_kafka:
        java = require_java(settings.JAVA_HOME)
        kafka_broker.ensure_class_archive(java, kafka_broker.ensure_jars(settings, say), settings, say)
    kafka_connect.ensure_jars(settings, say)  # RELAY=debezium's, and its tests'
    prometheus_server.ensure_installed(say)


def act_as_admin(settings: Settings) -> None:
    """Make this process's Kafka clients authenticate as the admin principal, as the launcher's
    work needs (topics, users, ACLs): always on the Kafka it runs; on one it is pointed at, the
    principal the environment names if it names one. The processes it starts never inherit it:
    each is given its own principal, and supervisord is started without these variables."""
    if settings.uses_own_kafka or principal_from_environment() is None:
        os.environ.update(settings.kafka_principal(ADMIN).environment())


def _run_id(settings: Settings, fresh: bool) -> str:
    """One id per supervisor daemon, in every process's EO_RUN_ID: the panel counts a process's
    starts within one run as restarts."""
    path = settings.EO_STATE_DIR / "run-id"
    if fresh or not path.exists():
        path.write_text(uuid.uuid4().hex)
    return path.read_text().strip()


def urls(settings: Settings, with_platform: bool = True) -> dict[str, str]:
    """What `make up` prints: label -> URL."""
    shown: dict[str, str] = {}
    for program in processes.platform_programs(settings) if with_platform else []:
        shown.update(program.urls)
    shown["Kafka bootstrap"] = settings.kafka_bootstrap_servers
    shown["PostgreSQL (admin)"] = redact(settings.admin_database_url)
    shown["Logs"] = str(settings.EO_STATE_DIR / "logs")
    return shown


def restart(settings: Settings, say: Say) -> bool:
    """Restart the platform's processes (not PostgreSQL or Kafka), e.g. after a code change."""
    supervisor = Supervisor(settings.EO_STATE_DIR)
    if not supervisor.is_running():
        return False
    platform = processes.platform_programs(settings)
    for program in platform:
        say(f"restarting {program.name}")
        supervisor.stop(program.name)
        supervisor.start(program.name, wait=False)
    for program in platform:
        _wait_healthy(supervisor, program)
    return True


def down(settings: Settings, say: Say) -> bool:
    """Stop everything the launcher started; False when nothing was running."""
    supervisor = Supervisor(settings.EO_STATE_DIR)
    if not supervisor.is_running():
        return False
    say("stopping every process")
    supervisor.shutdown()
    return True


def status(settings: Settings) -> list[dict[str, str]]:
    """One row per supervised process: name, state, pid and uptime (empty when down)."""
    supervisor = Supervisor(settings.EO_STATE_DIR)
    if not supervisor.is_running():
        return []
    return [
        {"name": info["name"], "state": info["statename"], "detail": info["description"]}
        for info in supervisor.all_info()
    ]
