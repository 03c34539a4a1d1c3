"""The contract suite in black-box mode, on the inventory-reservation consumer in each of its
implementations: driven only through Kafka, its database and its control endpoint
(docs/consumer-process-contract.md). The same scenarios, the same assertions, three stacks."""

from __future__ import annotations

import sys
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from confluent_kafka import ConsumerGroupType

from effectively_once import contract, schema
from effectively_once.contract import black_box, kafka
from effectively_once.contract.running import RunningConsumer, wait_for
from effectively_once.envelope import Envelope
from infra.launcher.kafka_broker import admin_client
from services.settings import PROJECT_ROOT, Settings
from tests.integration.conftest import isolated_schema, service_schema
from tests.integration.test_contract_suite import UNDECLARED, _placed, _units_reserved
from tests.support.stacks import JAVA_QUICK_START, java_inventory_command, node_inventory_command

IMPLEMENTATIONS = ("python", "node", "java")


def _command(implementation: str) -> list[str]:
    if implementation == "python":
        return [sys.executable, "-m", "services.inventory"]
    if implementation == "node":
        return node_inventory_command()
    if implementation == "java":
        return java_inventory_command()
    raise ValueError(implementation)


def _subject(implementation: str, database_url: str, settings: Settings) -> contract.ProcessSubject:
    return contract.ProcessSubject(
        database_url=database_url,
        bootstrap_servers=settings.kafka_bootstrap_servers,
        command=_command(implementation),
        cwd=PROJECT_ROOT,
        environment={"PYTHONPATH": str(PROJECT_ROOT), "JAVA_TOOL_OPTIONS": JAVA_QUICK_START},
        make_event=_placed,
        effects=_units_reserved,
        same_fact=lambda event: Envelope.new(event.type, event.key, event.payload),
    )


@pytest.fixture(scope="module")
def inventory_processes(runtime_db: str, settings: Settings) -> dict[str, contract.ProcessSubject]:
    """Each implementation on a schema of its own, built before any scenario starts."""
    return {
        implementation: _subject(implementation, service_schema(runtime_db, "inventory", as_url=True), settings)
        for implementation in IMPLEMENTATIONS
    }


def _on_every_implementation(
    subjects: dict[str, contract.ProcessSubject], run: Callable[[contract.ProcessSubject], None]
) -> None:
    """`run` against every implementation at once; a failure names its implementation."""
    with ThreadPoolExecutor(len(subjects)) as pool:
        runs = {name: pool.submit(run, subject) for name, subject in subjects.items()}
        failures = {name: future.exception() for name, future in runs.items() if future.exception() is not None}
    assert not failures, "\n\n".join(f"{name}: {type(error).__name__}: {error}" for name, error in failures.items())


@pytest.mark.parametrize("scenario", [s for s in contract.BLACK_BOX_SCENARIOS if s.name not in UNDECLARED], ids=str)
def test_every_implementation_keeps_the_contract_from_outside(
    inventory_processes: dict[str, contract.ProcessSubject], scenario: contract.BlackBoxScenario
) -> None:
    """The scenario against the three implementations at once: each run has consumer names,
    topics, keys and a schema of its own, and every wait in it is for a condition, so they share
    the machine without touching each other (and the suite takes a third of the time)."""
    _on_every_implementation(inventory_processes, scenario.run)


ON_THE_CLASSIC_PROTOCOL = ("sequential-duplicate", "crash-after-commit-before-ack", "winner-rolls-back")
"""Scenarios run again with CONSUMER_GROUP_PROTOCOL=classic: the consumers run the consumer protocol
(KIP-848) by default, and a redelivery after a crash goes through the client's assignment on the
classic one, the markers making it a duplicate all the same."""


@pytest.mark.parametrize(
    "scenario", [s for s in contract.BLACK_BOX_SCENARIOS if s.name in ON_THE_CLASSIC_PROTOCOL], ids=str
)
def test_every_implementation_keeps_the_contract_on_either_group_protocol(
    inventory_processes: dict[str, contract.ProcessSubject], scenario: contract.BlackBoxScenario, settings: Settings
) -> None:
    """The scenario on the classic protocol, and the broker's word that its groups are classic
    ones (the test above runs every scenario on the consumer protocol)."""
    prefix = f"classic-{uuid.uuid4().hex[:6]}"
    subjects = {
        name: replace(
            subject,
            environment={**subject.environment, "CONSUMER_GROUP_PROTOCOL": "classic"},
            consumer_prefix=f"{prefix}-{name}",
        )
        for name, subject in inventory_processes.items()
    }
    _on_every_implementation(subjects, scenario.run)
    kinds = _group_types(settings, prefix)
    assert kinds == {"python": "CLASSIC", "node": "CLASSIC", "java": "CLASSIC"}, (prefix, kinds)


REFUSED_EXIT = 70
"""How a process ends when the group refuses it for good (the Java consumer, refused its static
instance id): its supervisor starts it again."""


def _killed_after_one(subject: contract.ProcessSubject, name: str) -> tuple[kafka.Topics, Envelope, dict[str, str]]:
    """A static member (instance id `name`-0) that applied one event, then SIGKILLed: its topics,
    the event, and the environment that starts it again with the same id."""
    topics = kafka.new_topics(subject.bootstrap_servers, name)
    event = subject.make_event(subject.key())
    kafka.publish(subject.bootstrap_servers, topics.events, [event.to_json()])
    static = {"EO_INSTANCE_ID": f"{name}-0"}
    killed = RunningConsumer(subject, name, [topics.events], topics.dead_letters, **static)
    try:
        killed.wait_acknowledged(1)
    finally:
        killed.kill()
    return topics, event, static


def _started_again_at_once_after_a_kill(subject: contract.ProcessSubject) -> None:
    """A process SIGKILLed and started again at once with its static instance id consumes again:
    under the consumer protocol the broker refuses the id until the killed one's session ends, and
    the process either joins again itself (Python, TypeScript) or ends with REFUSED_EXIT for its
    supervisor to start it again (Java), as this loop does; every start before the one that
    consumes ends so."""
    name = subject.consumer_name("killed")
    topics, before, static = _killed_after_one(subject, name)
    after = subject.make_event(subject.key())
    kafka.publish(subject.bootstrap_servers, topics.events, [after.to_json()])
    exits: list[int] = []
    running: RunningConsumer | None = None
    deadline = time.monotonic() + 90
    try:
        while subject.effects_of(after) != 1:
            assert time.monotonic() < deadline, f"not consumed again 90 s after the kill; exits {exits}"
            if running is None or running.process.poll() is not None:
                if running is not None:
                    exits.append(running.process.returncode)
                try:
                    running = RunningConsumer(subject, name, [topics.events], topics.dead_letters, **static)
                except AssertionError as ended:  # it ended before it served
                    assert f"exited {REFUSED_EXIT} before it served" in str(ended), str(ended)
                    exits.append(REFUSED_EXIT)
            time.sleep(0.1)
    finally:
        if running is not None:
            running.stop()
    assert set(exits) <= {REFUSED_EXIT}, exits
    assert (subject.effects_of(before), subject.effects_of(after)) == (1, 1)


def test_every_implementation_started_again_at_once_after_a_kill_consumes_again(
    inventory_processes: dict[str, contract.ProcessSubject],
) -> None:
    _on_every_implementation(inventory_processes, _started_again_at_once_after_a_kill)


def _rewound_while_still_joining(subject: contract.ProcessSubject) -> None:
    """A rewind asked of a process started again at once after a kill, while the group still
    refuses its static id (the consumer protocol, until the killed one's session ends), waits for
    the member to join and moves its partition: it does not answer "no partitions"."""
    name = subject.consumer_name("joining")
    topics, event, static = _killed_after_one(subject, name)
    with RunningConsumer(subject, name, [topics.events], topics.dead_letters, **static) as restarted:
        moved = restarted.rewind("beginning")
        assert [(p["topic"], p["partition"]) for p in moved] == [(topics.events, 0)], moved
        assert restarted.wait_acknowledged(1)["duplicate"] == 1
    assert subject.effects_of(event) == 1


def test_a_rewind_asked_of_a_member_still_refused_its_id_waits_for_its_join(
    inventory_processes: dict[str, contract.ProcessSubject],
) -> None:
    """Python and TypeScript (the Java process ends for its supervisor while refused: REFUSED_EXIT)."""
    joining = {name: subject for name, subject in inventory_processes.items() if name != "java"}
    _on_every_implementation(joining, _rewound_while_still_joining)


def _group_types(settings: Settings, prefix: str) -> dict[str, str]:
    """Implementation -> the type the broker gives its group, for the groups named with `prefix`."""
    admin = admin_client(settings.kafka_bootstrap_servers)  # held: the answer needs its handle alive
    groups = admin.list_consumer_groups(types={ConsumerGroupType.CLASSIC, ConsumerGroupType.CONSUMER}).result(30)
    assert not groups.errors, groups.errors
    found = {g.group_id.split("-")[2]: g.type.name for g in groups.valid if g.group_id.startswith(prefix)}
    assert found, sorted(g.group_id for g in groups.valid)[-10:]
    return found


def _rewound_deliveries_are_duplicates(subject: contract.ProcessSubject) -> None:
    name = subject.consumer_name("rewind")
    topics = kafka.new_topics(subject.bootstrap_servers, name)
    events = [subject.make_event(subject.key()) for _ in range(3)]
    kafka.publish(subject.bootstrap_servers, topics.events, [event.to_json() for event in events])
    with RunningConsumer(subject, name, [topics.events], topics.dead_letters) as consumer:
        assert consumer.wait_acknowledged(3)["applied"] == 3
        moved = consumer.rewind("beginning")
        assert [(p["topic"], p["partition"]) for p in moved] == [(topics.events, 0)], moved
        outcomes = consumer.wait_acknowledged(6)
    assert (outcomes["applied"], outcomes["duplicate"]) == (3, 3), dict(outcomes)
    assert [subject.effects_of(event) for event in events] == [1, 1, 1]


def test_every_implementation_rewinds_its_group_and_the_redeliveries_are_duplicates(
    inventory_processes: dict[str, contract.ProcessSubject],
) -> None:
    """POST /rewind on the control endpoint (the panel's rewind button, the soak's rewinds): the
    partitions go back to the beginning, everything is delivered again, and nothing is applied twice."""
    _on_every_implementation(inventory_processes, _rewound_deliveries_are_duplicates)


def _a_rewind_skips_nothing_the_member_has_not_had(subject: contract.ProcessSubject) -> None:
    """The member holds its first message (a stall) while two more arrive, the second written a
    minute later; a rewind to that minute is asked meanwhile. The member stands before the first
    of the two, so a rewind that sought the minute's offset would skip it for good."""
    name = subject.consumer_name("rewind-behind")
    topics = kafka.new_topics(subject.bootstrap_servers, name)
    events = [subject.make_event(subject.key()) for _ in range(3)]
    earlier = datetime.now(UTC) - timedelta(minutes=2)
    later = earlier + timedelta(minutes=1)
    stamps = [earlier, earlier, later]
    with RunningConsumer(subject, name, [topics.events], topics.dead_letters) as consumer:
        consumer.arm("before_claim", "stall", stall_seconds=120)
        kafka.publish(subject.bootstrap_servers, topics.events, [events[0].to_json()], [_ms(stamps[0])])
        wait_for(lambda: consumer.fired("before_claim") == 1, 60, "the member to hold the first message", consumer.tail)
        kafka.publish(
            subject.bootstrap_servers, topics.events, [e.to_json() for e in events[1:]], [_ms(t) for t in stamps[1:]]
        )
        with ThreadPoolExecutor(1) as pool:  # Python's answer waits for the member's next poll
            rewinding = pool.submit(consumer.rewind, later.isoformat())
            wait_for(
                lambda: rewinding.done() or "rewind asked" in consumer.tail(200),
                30,
                "the rewind to be asked",
                consumer.tail,
            )
            consumer.release()
            rewinding.result()
        wait_for(lambda: subject.effects_of(events[2]) == 1, 60, "the last message's effect", consumer.tail)
    assert [subject.effects_of(event) for event in events] == [1, 1, 1], "a message was skipped or applied twice"


def test_no_implementation_rewinds_past_a_message_it_has_not_had(
    inventory_processes: dict[str, contract.ProcessSubject],
) -> None:
    """A rewind never moves a member forward (rewind_target): it goes back to the time, or stays
    where the member stands when the member has not reached the time."""
    _on_every_implementation(inventory_processes, _a_rewind_skips_nothing_the_member_has_not_had)


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


# The suite fails what breaks the pattern, seen from outside too: the demo's Python process run
# with a teaching strategy (a deliberate mistake) is the implementation under test.

MISTAKES = (
    ("no_dedup", "sequential-duplicate", r"two deliveries gave"),
    ("message_id_only_key", "two-consumer-names", r"holds 0 markers|gave \{.*'duplicate': [12]"),
    ("occurred_at_in_key", "copy-with-other-content", r"changing \['occurred_at'\] gave \{'applied': 2\}"),
)


@pytest.mark.parametrize(("strategy", "scenario_name", "violation"), MISTAKES, ids=[m[0] for m in MISTAKES])
def test_the_black_box_suite_fails_a_consumer_that_breaks_the_pattern(
    runtime_db: str,
    settings: Settings,
    strategy: str,
    scenario_name: str,
    violation: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The occurred_at mistake is tried with copies that move only occurred_at: the marker's key
    holding it is what the copy property must catch."""
    monkeypatch.setattr(black_box, "COPIED_FIELDS", ("occurred_at",))
    mistaken = contract.ProcessSubject(
        database_url=service_schema(runtime_db, "inventory", as_url=True),
        bootstrap_servers=settings.kafka_bootstrap_servers,
        command=[sys.executable, "-m", "services.inventory"],
        cwd=PROJECT_ROOT,
        environment={"PYTHONPATH": str(PROJECT_ROOT), "CONSUMER_STRATEGY": strategy},
        make_event=_placed,
        effects=_units_reserved,
    )
    [scenario] = [s for s in contract.BLACK_BOX_SCENARIOS if s.name == scenario_name]
    with pytest.raises(contract.ContractViolation, match=violation):
        scenario.run(mistaken)


def test_every_implementation_counts_a_message_marked_before_the_upgrade_as_a_duplicate_whatever_its_time(
    runtime_db: str, settings: Settings
) -> None:
    """An upgraded database: markers written in 0005's table (keyed with occurred_at) and in the
    legacy table before it move into migration 0008's (keyed by message id alone), and each stack
    counts a copy of such a message as a duplicate, with its occurred_at moved a day: nothing is
    applied again. A message never seen is applied."""
    runtime = sorted(schema.MIGRATIONS.glob("*.sql"))
    before = [m for m in runtime if m.name < "0005"]
    own = sorted((PROJECT_ROOT / "services/inventory/migrations").glob("*.sql"))

    def run(subject: contract.ProcessSubject) -> None:
        name = subject.consumer_name("upgraded")
        legacy, dated, fresh = (subject.make_event(subject.key()) for _ in range(3))
        with psycopg.connect(subject.database_url, autocommit=True) as connection:
            connection.execute(
                "INSERT INTO processed_message (consumer_name, message_id) VALUES (%s, %s)", (name, legacy.message_id)
            )
            for migration in (m for m in runtime if "0005" <= m.name < "0008"):
                connection.execute(migration.read_text())
            connection.execute(
                "INSERT INTO processed_message (consumer_name, message_id, occurred_at) VALUES (%s, %s, %s)",
                (name, dated.message_id, dated.occurred_at),
            )
            connection.execute((schema.MIGRATIONS / "0008_markers_keyed_by_message_id.sql").read_text())
        moved = [replace(event, occurred_at=event.occurred_at + timedelta(days=1)) for event in (legacy, dated)]
        topics = kafka.new_topics(subject.bootstrap_servers, name)
        kafka.publish(subject.bootstrap_servers, topics.events, [e.to_json() for e in (*moved, fresh)])
        with RunningConsumer(subject, name, [topics.events], topics.dead_letters) as consumer:
            outcomes = consumer.wait_acknowledged(3)
        assert (outcomes["applied"], outcomes["duplicate"]) == (1, 2), dict(outcomes)
        assert [subject.effects_of(event) for event in (legacy, dated, fresh)] == [0, 0, 1]
        assert [subject.markers_of(name, event) for event in (legacy, dated, fresh)] == [1, 1, 1]

    upgraded = {
        implementation: _subject(implementation, isolated_schema(runtime_db, *before, *own, as_url=True), settings)
        for implementation in IMPLEMENTATIONS
    }
    _on_every_implementation(upgraded, run)
