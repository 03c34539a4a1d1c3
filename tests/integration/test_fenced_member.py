"""A consumer process whose static group member is fenced ends, for its supervisor to restart it.

After a broker restart, a static member's own rejoin can fence the session it had (a soak found
it so): librdkafka then reports a fatal error, Spring Kafka stops the container, and neither client
consumes again. A process that stayed up would leave its partitions' messages waiting for good.
Here another member takes the process's group.instance.id, which fences it the same way. That is
the classic protocol's way, which the process runs here: under the consumer protocol the member
that joins with an id in use is the one refused (tests/integration/test_consumer_crashes.py)."""

from __future__ import annotations

import sys
import time

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient

from effectively_once import contract
from effectively_once.contract import kafka
from effectively_once.contract.running import RunningConsumer, wait_for
from effectively_once.kafka_client import client_config
from services.settings import PROJECT_ROOT, Settings
from tests.integration.conftest import service_schema
from tests.integration.test_contract_suite import _placed, _units_reserved
from tests.support.stacks import JAVA_QUICK_START, java_inventory_command

MEMBER_FAILED = 70
"""The exit status of a process whose group member failed for good (effectively_once.consumer.wiring)."""


def _command(implementation: str) -> list[str]:
    return [sys.executable, "-m", "services.inventory"] if implementation == "python" else java_inventory_command()


def _instance_ids(servers: str, group: str) -> list[str]:
    admin = AdminClient(client_config(servers))  # kept while its future is pending
    described = admin.describe_consumer_groups([group])[group].result(30)
    return [member.group_instance_id for member in described.members if member.group_instance_id]


@pytest.mark.parametrize("implementation", ["python", "java"])
def test_a_fenced_static_member_ends_its_process(runtime_db: str, settings: Settings, implementation: str) -> None:
    servers = settings.kafka_bootstrap_servers
    subject = contract.ProcessSubject(
        database_url=service_schema(runtime_db, "inventory", as_url=True),
        bootstrap_servers=servers,
        command=_command(implementation),
        cwd=PROJECT_ROOT,
        environment={"PYTHONPATH": str(PROJECT_ROOT), "JAVA_TOOL_OPTIONS": JAVA_QUICK_START},
        make_event=_placed,
        effects=_units_reserved,
    )
    name = subject.consumer_name(f"fenced-{implementation}")
    topics = kafka.new_topics(servers, name)
    kafka.publish(servers, topics.events, [_placed(subject.key()).to_json()])
    group = f"{name}-a"  # RunningConsumer's group for its default label
    process = RunningConsumer(
        subject,
        name,
        [topics.events],
        topics.dead_letters,
        EO_INSTANCE_ID=f"{name}-static",
        CONSUMER_MEMBERS="1",
        CONSUMER_GROUP_PROTOCOL="classic",
    )
    usurper: Consumer | None = None
    try:
        process.wait_acknowledged(1)
        [instance] = _instance_ids(servers, group)
        usurper = Consumer(
            {
                **client_config(servers),
                "group.id": group,
                "group.instance.id": instance,
                "session.timeout.ms": 6000,
                "partition.assignment.strategy": "cooperative-sticky",  # both implementations offer it
            }
        )
        usurper.subscribe([topics.events])
        deadline = time.monotonic() + 90
        while process.process.poll() is None and time.monotonic() < deadline:
            usurper.poll(0.2)
        wait_for(
            lambda: process.process.poll() is not None, 5, f"the fenced {implementation} process to end", process.tail
        )
        assert process.process.returncode == MEMBER_FAILED, process.tail()
    finally:
        process.stop()
        if usurper is not None:
            usurper.close()
