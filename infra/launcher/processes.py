"""Every process the native path supervises, with its command line and environment.

docker-compose.yml names the same services and variables; tests/unit/test_compose_file.py
holds the two together.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from infra.launcher import kafka_broker, postgres_cluster
from infra.launcher.supervisor import Program
from services.settings import PROJECT_ROOT, Settings, with_credentials
from services.topology import AUDITOR_ROLE, DATABASES

POSTGRES = "postgres"
KAFKA = "kafka"
CHAOS_PANEL = "chaos-panel"
OUTBOX_RELAY = "outbox-relay"


def postgres_program(settings: Settings, bindir: Path) -> Program:
    return Program(
        name=POSTGRES,
        command=postgres_cluster.server_command(bindir, settings),
        user=postgres_cluster.server_user(),
        stop_signal="INT",  # PostgreSQL's fast shutdown
        stop_wait_seconds=60,
        ports=(settings.POSTGRES_PORT,),
        priority=100,
    )


def kafka_program(settings: Settings, java: str, libs: Path) -> Program:
    return Program(
        name=KAFKA,
        command=kafka_broker.broker_command(java, libs, settings),
        stop_wait_seconds=60,
        ports=(settings.KAFKA_PORT, settings.KAFKA_CONTROLLER_PORT),
        priority=200,
    )


def _python_environment(settings: Settings) -> dict[str, str]:
    return {
        "EO_ENV": settings.EO_ENV,
        "KAFKA_BOOTSTRAP_SERVERS": settings.kafka_bootstrap_servers,
        "PYTHONPATH": str(PROJECT_ROOT),
        "PYTHONUNBUFFERED": "1",
    }


def platform_programs(settings: Settings) -> list[Program]:
    """The platform's own processes, each started with the project's Python."""
    panel_database = with_credentials(
        settings.admin_database_url, AUDITOR_ROLE, settings.AUDITOR_DB_PASSWORD, "postgres"
    )
    return [
        Program(
            name=CHAOS_PANEL,
            command=[sys.executable, "-m", "services.chaos_panel"],
            environment={
                **_python_environment(settings),
                "DATABASE_URL": panel_database,
                "CHAOS_PANEL_HOST": settings.CHAOS_PANEL_HOST,
                "CHAOS_PANEL_PORT": str(settings.CHAOS_PANEL_PORT),
            },
            ports=(settings.CHAOS_PANEL_PORT,),
            health_url=f"{settings.chaos_panel_url}/healthz",
            urls={"Chaos panel": settings.chaos_panel_url},
        ),
        Program(
            name=OUTBOX_RELAY,
            command=[sys.executable, "-m", "outbox_relay"],
            environment={
                **_python_environment(settings),
                "OUTBOX_DATABASE_URLS": json.dumps(
                    {db.name: settings.relay_database_url(db) for db in DATABASES if db.runs_consumer_runtime}
                ),
                "CONTROL_HOST": "127.0.0.1",
                "CONTROL_PORT": str(settings.OUTBOX_RELAY_CONTROL_PORT),
            },
            ports=(settings.OUTBOX_RELAY_CONTROL_PORT,),
            health_url=f"http://127.0.0.1:{settings.OUTBOX_RELAY_CONTROL_PORT}/metrics",
            urls={"Outbox relay metrics": f"http://127.0.0.1:{settings.OUTBOX_RELAY_CONTROL_PORT}/metrics"},
        ),
    ]
