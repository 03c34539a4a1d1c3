"""Real processes, really crashed at named fault points, and real redeliveries from Kafka."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from confluent_kafka import Producer

from effectively_once.envelope import Envelope
from effectively_once.faults import CRASH_EXIT_CODE
from effectively_once.kafka_client import client_config
from services.settings import Settings
from tests.integration.conftest import Topics
from tests.support.consumer_process import ConsumerProcess
from tests.support.waiting import wait_for
from workbench.ledger import entry, ledger_rows, markers
from workbench.network import free_port


def publish(settings: Settings, topic: str, *events: Envelope) -> None:
    producer = Producer({**client_config(settings.kafka_bootstrap_servers), "acks": "all"})
    for event in events:
        producer.produce(topic, key=event.key, value=event.to_json())
    assert producer.flush(30) == 0


@pytest.fixture
def consumer_processes() -> Iterator[list[ConsumerProcess]]:
    started: list[ConsumerProcess] = []
    yield started
    for process in started:
        process.kill()


def _process(
    settings: Settings,
    runtime_db: str,
    name: str,
    topics: Topics,
    started: list[ConsumerProcess],
    **environment: str,
) -> ConsumerProcess:
    process = ConsumerProcess(
        name, topics.events, topics.dead_letters, runtime_db, settings.kafka_bootstrap_servers, environment
    )
    started.append(process)
    return process.start()


def test_a_crash_after_commit_before_ack_is_redelivered_by_kafka_and_counted_as_duplicate(
    settings: Settings,
    runtime_db: str,
    name: str,
    topics: Topics,
    consumer_processes: list[ConsumerProcess],
) -> None:
    event, sentinel = entry("order-7"), entry("order-7")  # same key: same partition, in order
    publish(settings, topics.events, event, sentinel)

    crashing = _process(
        settings, runtime_db, name, topics, consumer_processes, EO_FAULTS="after_commit_before_ack=crash"
    )
    assert crashing.wait(60) == CRASH_EXIT_CODE, crashing.output
    assert ledger_rows(runtime_db, name, event.message_id) == 1  # committed before the crash
    assert crashing.outcomes_for(event.message_id) == ["applied"]

    restarted = _process(settings, runtime_db, name, topics, consumer_processes)
    wait_for(
        lambda: ledger_rows(runtime_db, name, sentinel.message_id) == 1,
        60,
        "the restarted consumer to reach the message after the redelivered one",
    )
    assert restarted.stop() == 0, restarted.output
    assert restarted.outcomes_for(event.message_id) == ["duplicate"]
    assert ledger_rows(runtime_db, name, event.message_id) == 1
    assert markers(runtime_db, name, event.message_id) == 1


@pytest.mark.parametrize(("strategy", "effects"), [("ack_before_commit", 0), ("correct", 1)])
def test_a_crash_before_commit_loses_the_message_only_when_it_was_acknowledged_first(
    settings: Settings,
    runtime_db: str,
    name: str,
    topics: Topics,
    consumer_processes: list[ConsumerProcess],
    strategy: str,
    effects: int,
) -> None:
    event, sentinel = entry("order-8"), entry("order-8")
    publish(settings, topics.events, event, sentinel)

    crashing = _process(
        settings,
        runtime_db,
        name,
        topics,
        consumer_processes,
        EO_FAULTS="before_commit=crash",
        CONSUMER_STRATEGY=strategy,
    )
    assert crashing.wait(60) == CRASH_EXIT_CODE, crashing.output
    assert ledger_rows(runtime_db, name, event.message_id) == 0  # the transaction never committed

    restarted = _process(settings, runtime_db, name, topics, consumer_processes, CONSUMER_STRATEGY=strategy)
    wait_for(
        lambda: ledger_rows(runtime_db, name, sentinel.message_id) == 1,
        60,
        "the restarted consumer to apply the next message",
    )
    assert restarted.stop() == 0
    assert ledger_rows(runtime_db, name, event.message_id) == effects
    if strategy == "ack_before_commit":
        assert "TEACHING STRATEGY ACK_BEFORE_COMMIT IS ACTIVE" in restarted.output


def test_a_static_member_refused_its_instance_id_joins_again_once_the_broker_lets_it_go(
    settings: Settings, runtime_db: str, name: str, topics: Topics, consumer_processes: list[ConsumerProcess]
) -> None:
    """Under the consumer protocol the broker refuses a static member's instance id
    to a second process while the first holds it, as it does to a process restarted after a kill
    until the killed one's session ends: the refused process joins again with a fresh client,
    and takes the partitions once the holder is killed, without ending."""
    first, second = entry("order-9"), entry("order-9")
    publish(settings, topics.events, first)
    holder = _process(settings, runtime_db, name, topics, consumer_processes, CONSUMER_GROUP_PROTOCOL="consumer")
    wait_for(lambda: ledger_rows(runtime_db, name, first.message_id) == 1, 60, "the first member to apply")

    waiting = _process(  # the same EO_INSTANCE_ID
        settings, runtime_db, name, topics, consumer_processes, CONSUMER_GROUP_PROTOCOL="consumer"
    )
    wait_for(lambda: "the group refused this member" in waiting.output, 60, "the broker to refuse the id")
    holder.kill()
    publish(settings, topics.events, second)
    wait_for(
        lambda: ledger_rows(runtime_db, name, second.message_id) == 1,
        60,
        "the refused member to join once the killed one's session ended, and apply",
    )
    assert waiting.process is not None and waiting.process.poll() is None, waiting.output
    assert waiting.stop() == 0, waiting.output  # its log is whole once it ended
    assert waiting.outcomes_for(second.message_id) == ["applied"]


def test_a_crash_armed_through_the_control_endpoint_really_ends_the_process(
    settings: Settings,
    runtime_db: str,
    name: str,
    topics: Topics,
    consumer_processes: list[ConsumerProcess],
) -> None:
    port = free_port()
    running = _process(settings, runtime_db, name, topics, consumer_processes, CONTROL_PORT=str(port))
    control = f"http://127.0.0.1:{port}/faults"
    wait_for(lambda: _answers(control), 30, "the control endpoint")
    armed = httpx.post(control, json={"point": "after_commit_before_ack", "action": "crash"}, timeout=5)
    assert armed.status_code == 200, armed.text
    event = entry("order-9")
    publish(settings, topics.events, event)
    assert running.wait(60) == CRASH_EXIT_CODE, running.output
    assert ledger_rows(runtime_db, name, event.message_id) == 1


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_sigterm_finishes_the_work_in_hand_and_exits_cleanly_logging_ids_but_no_payload(
    settings: Settings,
    runtime_db: str,
    name: str,
    topics: Topics,
    consumer_processes: list[ConsumerProcess],
) -> None:
    events = [entry(f"order-{n}", card_number=f"4111-1111-1111-{n:04}") for n in range(10)]
    publish(settings, topics.events, *events)
    running = _process(settings, runtime_db, name, topics, consumer_processes)
    wait_for(lambda: ledger_rows(runtime_db, name) == 10, 60, "all ten messages to apply")
    assert running.stop() == 0, running.output
    assert "4111-1111" not in running.output, "a payload reached the logs"
    applied = [e for e in running.log_entries() if e.get("outcome") == "applied"]
    assert {e["message_id"] for e in applied} == {event.message_id for event in events}
    assert all(e["consumer"] == name and e["event_type"] and e["trace_id"] for e in applied)
    stopped = [e for e in running.log_entries() if e["message"].startswith("stopped after")]
    assert stopped and "acknowledging 10 deliveries" in stopped[0]["message"]

    # Offsets were committed on the way out: a new member redelivers nothing.
    again = _process(settings, runtime_db, name, topics, consumer_processes)
    sentinel = entry("order-after")
    publish(settings, topics.events, sentinel)
    wait_for(lambda: ledger_rows(runtime_db, name, sentinel.message_id) == 1, 60, "the sentinel")
    assert again.stop() == 0
    assert not [e for e in again.log_entries() if e.get("outcome") == "duplicate"]
