"""Test tiers by folder, and the session's real PostgreSQL and Kafka.

Where the infrastructure comes from, in order: DATABASE_URL and KAFKA_BOOTSTRAP_SERVERS when both
are set; testcontainers when a Docker engine answers; otherwise the native launcher (the same
stack `make up` runs, started here when it is not running and stopped again at the end).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings as hypothesis_settings

from effectively_once.contract import ports
from infra.launcher import kafka_broker, provisioning, stack
from infra.launcher.stack import Endpoints
from infra.launcher.supervisor import Supervisor
from services.settings import Settings
from tests.support import failures
from tests.support.stacks import JAVA_QUICK_START

TIERS = ("unit", "integration", "e2e")

# A test that hangs where pytest-timeout cannot stop it ends the run with every thread's stack.
pytest_plugins = ["tests.support.hang_guard"]

# `make test` runs the end-to-end tier beside the others (tests/run_tiers.sh), each picking the
# ports of the servers it starts from a band of its own: the two never pick the same port.
if band := os.environ.get("EO_TEST_PORTS"):
    ports.LOW, ports.HIGH = (int(bound) for bound in band.split("-"))

# The systems the tests start are their own: the tests act as their Kafka admin (topics, reading
# anything), as the launcher does. Each process those systems run has its own principal.
stack.act_as_admin(Settings(KAFKA_BOOTSTRAP_SERVERS=os.environ.get("KAFKA_BOOTSTRAP_SERVERS")))

# Property tests draw new examples on every run on a developer's machine (EO_PROPERTY_EXAMPLES=N
# for a long hunt); CI draws the same ones each time, so a red CI names a change, not a draw.
# No deadline: a property test checks what holds, not how fast (speed is the benchmarks' business),
# and on two busy cores an example can take longer than Hypothesis's 200 ms now and then.
hypothesis_settings.register_profile("ci", derandomize=True, print_blob=True, deadline=None)
hypothesis_settings.register_profile("dev", print_blob=True, deadline=None)
hypothesis_settings.load_profile("ci" if os.environ.get("CI") else "dev")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.failed:
        failures.note(report.nodeid)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        # The first folder under tests/ is the tier: tests/e2e/panel/… is end-to-end too.
        tier = Path(str(item.fspath)).relative_to(Path(__file__).parent).parts[0]
        if tier in TIERS:
            item.add_marker(getattr(pytest.mark, tier))


def _docker_engine_answers() -> bool:
    if not shutil.which("docker"):
        return False
    try:
        return subprocess.run(["docker", "info"], capture_output=True, timeout=10).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def _say(message: str) -> None:
    print(f"[infrastructure] {message}", flush=True)


@pytest.fixture(scope="session")
def settings(infrastructure: Endpoints) -> Settings:
    """Settings that point at the session's infrastructure."""
    return Settings(
        DATABASE_URL=infrastructure.admin_database_url,
        KAFKA_BOOTSTRAP_SERVERS=infrastructure.kafka_bootstrap_servers,
    )


@pytest.fixture(scope="session")
def infrastructure() -> Iterator[Endpoints]:
    """Real PostgreSQL and Kafka, provisioned with every service database and topic."""
    if os.environ.get("DATABASE_URL") and os.environ.get("KAFKA_BOOTSTRAP_SERVERS"):
        settings = Settings()
        provisioning.provision(settings, _say)
        kafka_broker.ensure_topics(settings.kafka_bootstrap_servers)
        yield Endpoints(settings.admin_database_url, settings.kafka_bootstrap_servers)
    elif _docker_engine_answers():
        yield from _containers()
    else:
        settings = Settings(DATABASE_URL=None, KAFKA_BOOTSTRAP_SERVERS=None, KAFKA_JVM_OPTIONS=JAVA_QUICK_START)
        was_running = Supervisor(settings.EO_STATE_DIR).is_running()
        endpoints = stack.up(settings, _say, with_platform=False)
        yield endpoints
        if not was_running:
            stack.down(settings, _say)


def _containers() -> Iterator[Endpoints]:
    from testcontainers.kafka import KafkaContainer
    from testcontainers.postgres import PostgresContainer

    password = Settings().POSTGRES_PASSWORD
    with (
        PostgresContainer("postgres:15", username="postgres", password=password, dbname="postgres") as postgres,
        KafkaContainer().with_kraft() as kafka,
    ):
        settings = Settings(
            DATABASE_URL=postgres.get_connection_url(driver=None),
            KAFKA_BOOTSTRAP_SERVERS=kafka.get_bootstrap_server(),
        )
        provisioning.provision(settings, _say)
        kafka_broker.ensure_topics(settings.kafka_bootstrap_servers)
        yield Endpoints(settings.admin_database_url, settings.kafka_bootstrap_servers)
