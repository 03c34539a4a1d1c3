"""Every process the native path supervises, with its command line and environment.

docker-compose.yml names the same services and variables; tests/unit/test_compose_file.py
holds the two together.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from effectively_once.kafka_requests import ENVIRONMENT_VARIABLE
from infra.launcher import inventory_implementations, kafka_broker, kafka_connect, postgres_cluster, prometheus_server
from infra.launcher.supervisor import Program
from outbox_relay.wiring import relay_environment
from services.kafka_access import principal_of
from services.settings import PROJECT_ROOT, Settings, with_credentials
from services.topology import AUDITOR_ROLE, database

POSTGRES = "postgres"
KAFKA = "kafka"
"""The Kafka node's name with BROKERS=1; with three, kafka_broker.node_names()."""
CHAOS_PANEL = "chaos-panel"
OUTBOX_RELAY = "outbox-relay"
KAFKA_CONNECT = "kafka-connect"
"""RELAY=debezium's relay: Kafka Connect's worker with one Debezium connector per outbox database."""
ORDERS_API = "orders-api"
PAYMENT_PROVIDER = "payment-provider"
MAIL = "mail"
PROMETHEUS = "prometheus"
BROKER_CONTROL = "kafka-control"
"""The Kafka nodes' control endpoint (infra/launcher/broker_control.py): native path only, where the
launcher runs the nodes; the panel's broker faults go through it."""
BROKER_CONTROL_OFFSET = 9
"""Its port: CONTROL_PORT_BASE + 9, beside the background processes' (1 to 8)."""
POSTGRES_CONTROL = "postgres-control"
"""The PostgreSQL pair's control endpoint (infra/launcher/postgres_control.py): with POSTGRES=ha on
the native path; the panel's failover goes through it."""
POSTGRES_CONTROL_OFFSET = 10

BACKGROUND = (
    # name, module and arguments, database, control port offset, group members (consumers only)
    (OUTBOX_RELAY, ["outbox_relay"], None, 1, 0),
    ("orders-saga", ["services.orders", "saga"], "orders", 2, 2),
    ("inventory", ["services.inventory"], "inventory", 3, 2),
    ("payment", ["services.payment"], "payment", 4, 2),
    ("payment-executor", ["services.payment.executor"], "payment", 5, 0),
    ("notification", ["services.notification", "dispatch"], "notification", 6, 2),
    ("sales-projection", ["services.notification", "projection"], "notification", 7, 2),
    ("notification-dispatcher", ["services.notification.dispatcher"], "notification", 8, 0),
)
"""Processes without an HTTP API of their own: consumers, executors and the relay. Each consumer
runs two members of its group, so a duplicate that reaches two partitions really races."""


REPLICATED = {OUTBOX_RELAY, "orders-saga", "inventory", "payment", "notification", "sales-projection"}
"""What REPLICAS multiplies: every consumer (more members of the same groups) and the relay (its
per-key advisory locks let any number run). Replica k of `inventory` is `inventory-k` (k ≥ 2)."""


SHARE_GROUP_PROGRAMS = {"notification", "sales-projection"}
"""The programs of services.topology.SHARE_GROUP_CONSUMERS: share groups with SHARE_GROUPS=on."""


@dataclass(frozen=True)
class Instance:
    name: str
    module: list[str]
    database: str | None
    port: int
    members: int
    replica: int

    @property
    def may_share(self) -> bool:
        """Whether this is a consumer of SHARE_GROUP_PROGRAMS (its replicas too): a share group with
        SHARE_GROUPS=on."""
        program = self.name if self.replica == 1 else self.name.rsplit("-", 1)[0]
        return bool(self.members) and program in SHARE_GROUP_PROGRAMS


def background_instances(settings: Settings) -> list[Instance]:
    """Every background process to run, replicas included, each with its control port:
    CONTROL_PORT_BASE + its number for the first, + 10 × (replica − 1) more for the others."""
    instances = []
    for name, module, database_name, offset, members in BACKGROUND:
        for replica in range(1, (settings.REPLICAS if name in REPLICATED else 1) + 1):
            instances.append(
                Instance(
                    name if replica == 1 else f"{name}-{replica}",
                    module,
                    database_name,
                    settings.CONTROL_PORT_BASE + offset + 10 * (replica - 1),
                    members,
                    replica,
                )
            )
    return instances


def share_group_instances(settings: Settings) -> list[str]:
    """The processes that consume as share groups here: none unless SHARE_GROUPS=on."""
    if settings.SHARE_GROUPS != "on":
        return []
    return [instance.name for instance in background_instances(settings) if instance.may_share]


def control_urls(settings: Settings) -> dict[str, str]:
    """Process name -> its control endpoint (/metrics, /faults, and for consumers /strategy, /rewind)."""
    return {instance.name: f"http://127.0.0.1:{instance.port}" for instance in background_instances(settings)}


def postgres_programs(settings: Settings, bindir: Path) -> list[Program]:
    """`postgres`, or with POSTGRES=ha `postgres-1` and `postgres-2` (either may be the primary)."""
    return [
        Program(
            name=name,
            command=postgres_cluster.server_command(bindir, settings, node),
            user=postgres_cluster.server_user(),
            stop_signal="INT",  # PostgreSQL's fast shutdown
            stop_wait_seconds=60,
            ports=(settings.postgres_node_ports[node - 1],),
            priority=100,
        )
        for node, name in enumerate(postgres_cluster.node_names(settings), start=1)
    ]


def kafka_programs(settings: Settings, java: str, libs: Path) -> list[Program]:
    """One program per Kafka node: `kafka`, or `kafka-1` to `kafka-3` with BROKERS=3.

    The nodes of a cluster stop one after another (each its own priority, the last node first).
    The one that stops last has no quorum left to hand its partitions to, and would wait for a
    controller until killed: it is given 15 s, not 60 (its log is recovered at the next start)."""
    return [
        Program(
            name=name,
            command=kafka_broker.broker_command(java, libs, settings, node),
            stop_wait_seconds=60 if settings.BROKERS == 1 else 15,
            ports=settings.kafka_node_ports[node - 1],
            priority=200 + node - 1,
        )
        for node, name in enumerate(kafka_broker.node_names(settings), start=1)
    ]


def kafka_connect_program(settings: Settings, java: str, libs: Path) -> Program:
    """RELAY=debezium's relay, started after the slots exist (stack.up)."""
    return Program(
        name=KAFKA_CONNECT,
        command=kafka_connect.command(java, libs, settings),
        stop_wait_seconds=30,
        ports=(settings.KAFKA_CONNECT_PORT,),
        priority=300,
    )


def _python_environment(settings: Settings, name: str, run_id: str) -> dict[str, str]:
    return {
        "EO_ENV": settings.EO_ENV,
        "EO_PROCESS_NAME": name,
        "PGAPPNAME": name,  # libpq names each database session after its process (pg_stat_activity, logs)
        **({"EO_RUN_ID": run_id} if run_id else {}),
        "KAFKA_BOOTSTRAP_SERVERS": settings.kafka_bootstrap_servers,
        **settings.kafka_principal(principal_of(name)).environment(),
        **({"ALLOWED_HOSTS": settings.ALLOWED_HOSTS} if settings.ALLOWED_HOSTS else {}),
        "PYTHONPATH": str(PROJECT_ROOT),
        "PYTHONUNBUFFERED": "1",
        **(
            {ENVIRONMENT_VARIABLE: str(settings.KAFKA_STATISTICS_INTERVAL_MS)}
            if settings.KAFKA_STATISTICS_INTERVAL_MS
            else {}
        ),
    }


def _http_service(
    settings: Settings,
    run_id: str,
    name: str,
    module: str,
    database_name: str,
    host_variable: str,
    port_variable: str,
    port: int,
    label: str,
    path: str = "/docs",
    sandbox: bool = False,
) -> Program:
    """An HTTP service; a sandbox (the outside world) is also given its admin password."""
    return Program(
        name=name,
        command=[sys.executable, "-m", module],
        environment={
            **_python_environment(settings, name, run_id),
            "DATABASE_URL": settings.service_database_url(database(database_name)),
            host_variable: "127.0.0.1",
            port_variable: str(port),
            **({"SANDBOX_ADMIN_PASSWORD": settings.SANDBOX_ADMIN_PASSWORD} if sandbox else {}),
        },
        ports=(port,),
        health_url=f"http://127.0.0.1:{port}/healthz",
        urls={label: f"http://127.0.0.1:{port}{path}"},
    )


def broker_control_url(settings: Settings) -> str:
    """The Kafka nodes' control endpoint; "" when the launcher does not run Kafka."""
    return f"http://127.0.0.1:{settings.CONTROL_PORT_BASE + BROKER_CONTROL_OFFSET}" if settings.uses_own_kafka else ""


def broker_control_program(settings: Settings, run_id: str) -> Program:
    port = settings.CONTROL_PORT_BASE + BROKER_CONTROL_OFFSET
    environment = {
        key: value
        for key, value in _python_environment(settings, BROKER_CONTROL, run_id).items()
        if key != "KAFKA_BOOTSTRAP_SERVERS"  # it finds the nodes it runs beside from the settings below
    }
    return Program(
        name=BROKER_CONTROL,
        command=[sys.executable, "-m", "infra.launcher.broker_control"],
        environment={
            **environment,
            "EO_STATE_DIR": str(settings.EO_STATE_DIR),
            "KAFKA_PORT": str(settings.KAFKA_PORT),
            "KAFKA_CONTROLLER_PORT": str(settings.KAFKA_CONTROLLER_PORT),
            "CONTROL_PORT": str(port),
        },
        ports=(port,),
        health_url=f"http://127.0.0.1:{port}/healthz",
    )


def postgres_control_url(settings: Settings) -> str:
    """The PostgreSQL pair's control endpoint; "" unless the launcher runs a pair."""
    if not settings.uses_own_postgres or settings.POSTGRES != "ha":
        return ""
    return f"http://127.0.0.1:{settings.CONTROL_PORT_BASE + POSTGRES_CONTROL_OFFSET}"


def postgres_control_program(settings: Settings, run_id: str) -> Program:
    """It needs no Kafka: the pair's settings and the supervisor's state directory only."""
    port = settings.CONTROL_PORT_BASE + POSTGRES_CONTROL_OFFSET
    return Program(
        name=POSTGRES_CONTROL,
        command=[sys.executable, "-m", "infra.launcher.postgres_control"],
        environment={
            "EO_ENV": settings.EO_ENV,
            "EO_PROCESS_NAME": POSTGRES_CONTROL,
            **({"EO_RUN_ID": run_id} if run_id else {}),
            **({"ALLOWED_HOSTS": settings.ALLOWED_HOSTS} if settings.ALLOWED_HOSTS else {}),
            **({"PG_BINDIR": settings.PG_BINDIR} if settings.PG_BINDIR else {}),
            "PYTHONPATH": str(PROJECT_ROOT),
            "PYTHONUNBUFFERED": "1",
            "EO_STATE_DIR": str(settings.EO_STATE_DIR),
            "POSTGRES": settings.POSTGRES,
            "POSTGRES_HOST": settings.POSTGRES_HOST,
            "POSTGRES_PORT": str(settings.POSTGRES_PORT),
            "POSTGRES_PASSWORD": settings.POSTGRES_PASSWORD,
            "CONTROL_PORT": str(port),
        },
        ports=(port,),
        health_url=f"http://127.0.0.1:{port}/healthz",
    )


def scrape_targets(settings: Settings) -> dict[str, str]:
    """Process name -> host:port of its /metrics, for Prometheus."""
    return {
        CHAOS_PANEL: f"127.0.0.1:{settings.CHAOS_PANEL_PORT}",
        ORDERS_API: f"127.0.0.1:{settings.ORDERS_API_PORT}",
        PAYMENT_PROVIDER: f"127.0.0.1:{settings.PAYMENT_PROVIDER_PORT}",
        MAIL: f"127.0.0.1:{settings.MAIL_PORT}",
        **{name: url.removeprefix("http://") for name, url in control_urls(settings).items()},
    }


def prometheus_program(settings: Settings) -> Program:
    return Program(
        name=PROMETHEUS,
        command=prometheus_server.command(settings),
        stop_wait_seconds=30,
        ports=(settings.PROMETHEUS_PORT,),
        priority=800,
        health_url=f"http://127.0.0.1:{settings.PROMETHEUS_PORT}/-/ready",
        urls={"Prometheus": f"http://127.0.0.1:{settings.PROMETHEUS_PORT}"},
    )


DEMO_ASSIGNMENT = "range,roundrobin"
"""The demo's consumers share each topic's partitions among a group's members (range). The
runtime's default, cooperative-sticky, balances only the count: after its members rejoin one by
one (a broker frozen past the session timeout), one member may hold every partition of a topic,
and the labs' races, which need two members to get the same message at once, cannot happen.
docs/consumer-runtime.md says more."""


def platform_programs(settings: Settings, run_id: str = "") -> list[Program]:
    """The platform's own processes, each started with the project's Python."""
    panel_database = with_credentials(
        settings.admin_database_url, AUDITOR_ROLE, settings.AUDITOR_DB_PASSWORD, "postgres"
    )
    panel_token = {"CHAOS_PANEL_TOKEN": settings.CHAOS_PANEL_TOKEN} if settings.CHAOS_PANEL_TOKEN else {}
    broker_control = {"BROKER_CONTROL_URL": broker_control_url(settings)} if settings.uses_own_kafka else {}
    postgres_control = {"POSTGRES_CONTROL_URL": url} if (url := postgres_control_url(settings)) else {}
    connect = (
        {"KAFKA_CONNECT_URL": f"http://127.0.0.1:{settings.KAFKA_CONNECT_PORT}"} if settings.RELAY == "debezium" else {}
    )
    programs = [
        Program(
            name=CHAOS_PANEL,
            command=[sys.executable, "-m", "chaos_panel"],
            environment={
                **_python_environment(settings, CHAOS_PANEL, run_id),
                "DATABASE_URL": panel_database,
                "CHAOS_PANEL_HOST": settings.CHAOS_PANEL_HOST,
                "CHAOS_PANEL_PORT": str(settings.CHAOS_PANEL_PORT),
                "CONTROL_URLS": json.dumps(control_urls(settings)),
                "ORDERS_API_URL": f"http://127.0.0.1:{settings.ORDERS_API_PORT}",
                "PAYMENT_PROVIDER_URL": f"http://127.0.0.1:{settings.PAYMENT_PROVIDER_PORT}",
                "MAIL_URL": f"http://127.0.0.1:{settings.MAIL_PORT}",
                "SANDBOX_ADMIN_PASSWORD": settings.SANDBOX_ADMIN_PASSWORD,
                "PROMETHEUS_URL": f"http://127.0.0.1:{settings.PROMETHEUS_PORT}",
                "SHARE_GROUPS": settings.SHARE_GROUPS,
                "SHARE_LOCK_SECONDS": str(settings.SHARE_LOCK_SECONDS),
                **panel_token,
                **broker_control,
                **postgres_control,
                **connect,
            },
            ports=(settings.CHAOS_PANEL_PORT,),
            health_url=f"{settings.chaos_panel_url}/healthz",
            urls={"Chaos panel": settings.chaos_panel_url},
        ),
        _http_service(
            settings,
            run_id,
            ORDERS_API,
            "services.orders",
            "orders",
            "ORDERS_API_HOST",
            "ORDERS_API_PORT",
            settings.ORDERS_API_PORT,
            "Order API (OpenAPI)",
        ),
        _http_service(
            settings,
            run_id,
            PAYMENT_PROVIDER,
            "services.payment_provider",
            "payment_provider",
            "PAYMENT_PROVIDER_HOST",
            "PAYMENT_PROVIDER_PORT",
            settings.PAYMENT_PROVIDER_PORT,
            "Payment provider sandbox",
            sandbox=True,
        ),
        _http_service(
            settings,
            run_id,
            MAIL,
            "services.mail",
            "mail",
            "MAIL_HOST",
            "MAIL_PORT",
            settings.MAIL_PORT,
            "Mail sandbox inbox",
            path="/",
            sandbox=True,
        ),
    ]
    for instance in background_instances(settings):
        name, module, database_name, port, members = (
            instance.name,
            instance.module,
            instance.database,
            instance.port,
            instance.members,
        )
        environment = {
            **_python_environment(settings, name, run_id),
            "CONTROL_HOST": "127.0.0.1",
            "CONTROL_PORT": str(port),
        }
        if database_name is None:  # the relay: every outbox, through its own role
            environment |= relay_environment(settings)
        else:
            environment["DATABASE_URL"] = settings.service_database_url(database(database_name))
            environment["EO_INSTANCE_ID"] = f"{name}-0" if instance.replica == 1 else name
        if members:
            environment["CONSUMER_MEMBERS"] = str(members)
            environment["CONSUMER_WORKERS"] = str(settings.CONSUMER_WORKERS)
            environment["CONSUMER_ASSIGNMENT"] = DEMO_ASSIGNMENT
            environment["CONSUMER_GROUP_PROTOCOL"] = settings.GROUP_PROTOCOL
        if instance.may_share:
            environment["CONSUMER_SHARE_GROUP"] = settings.SHARE_GROUPS
            environment["CONSUMER_SHARE_MEMBERS"] = str(settings.SHARE_MEMBERS)
            if settings.SHARE_GROUPS == "on":
                environment["CONSUMER_WORKERS"] = "1"  # a share member has one; more members instead
        if name in ("payment-executor", "notification-dispatcher"):
            environment["PENDING_WORK_MAX_AGE_SECONDS"] = f"{settings.PENDING_WORK_MAX_AGE_SECONDS:g}"
            environment["PENDING_WORK_MAX_DELAY_SECONDS"] = f"{settings.PENDING_WORK_MAX_DELAY_SECONDS:g}"
        if name == "payment-executor":
            environment["PAYMENT_PROVIDER_URL"] = f"http://127.0.0.1:{settings.PAYMENT_PROVIDER_PORT}"
        if name == "notification-dispatcher":
            environment["MAIL_URL"] = f"http://127.0.0.1:{settings.MAIL_PORT}"
        programs.append(
            Program(
                name=name,
                command=(
                    inventory_implementations.command(settings.INVENTORY_IMPL)
                    if module == ["services.inventory"]
                    else [sys.executable, "-m", *module]
                ),
                environment=environment,
                ports=(port,),
                health_url=f"http://127.0.0.1:{port}/metrics",
            )
        )
    if settings.uses_own_kafka:
        programs.append(broker_control_program(settings, run_id))
    if postgres_control_url(settings):
        programs.append(postgres_control_program(settings, run_id))
    programs.append(prometheus_program(settings))
    return programs
