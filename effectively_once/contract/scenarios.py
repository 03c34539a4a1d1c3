"""The scenarios: the pattern's eight, then a copy with other content, a semantic duplicate,
out-of-order delivery and poison.

Each runs the team's handlers through the runtime itself (the processor for the transaction
scenarios, the Kafka loop and a real process for the rest) and checks the team's tables through
`Subject.effects`. The copy and the semantic duplicate are properties: Hypothesis draws the
fields a copy changes, and how many semantic duplicates come and when.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any, Generic, TypeVar

import psycopg

from ..consumer.processor import MessageProcessor, NonRetryable, ProcessorConfig, TerminalFailure
from ..consumer.transaction import Handler
from ..envelope import Envelope
from ..faults import FaultPoints
from ..outcomes import Outcome
from . import kafka
from .subject import Subject, Tables


class ContractViolation(AssertionError):
    """The consumer broke the pattern: the message says what was expected and what was seen."""


class NotDeclared(Exception):
    """The subject does not declare what this scenario needs (skip it, or declare it)."""


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise ContractViolation(message)


class Deliveries:
    """Telemetry that keeps what the processor recorded of each delivery."""

    def __init__(self) -> None:
        self.told: list[dict[str, Any]] = []

    def emit(self, kind: str, **fields: Any) -> None:
        self.told.extend(fields.get("items", [fields]) if kind in ("delivery", "deliveries") else [])

    def flush(self, timeout: float) -> None:
        pass

    def error_classes(self) -> list[str]:
        return [str(d.get("error_class")) for d in self.told if d.get("outcome") == Outcome.RETRYABLE_FAILURE]


def _processor(
    subject: Subject,
    name: str,
    handlers: Mapping[str, Handler],
    faults: FaultPoints | None = None,
    isolation_level: str = "READ COMMITTED",
    telemetry: Deliveries | None = None,
) -> MessageProcessor:
    return MessageProcessor(
        ProcessorConfig(consumer_name=name, isolation_level=isolation_level, backoff_base_seconds=0.001),
        connect=subject.connect,
        handlers=handlers,
        faults=faults,
        telemetry=telemetry,
    )


def _wait_until_blocked_on_a_lock(subject: Subject, backend_pid: int, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    with subject.connect(autocommit=True) as observer:
        while time.monotonic() < deadline:
            row = observer.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (backend_pid,))
            if (found := row.fetchone()) and found[0] == "Lock":
                return
            time.sleep(0.01)
    raise ContractViolation(f"the second delivery never waited on the marker's unique index (backend {backend_pid})")


def _race(
    subject: Subject, scenario: str, winner_rolls_back: bool, isolation_level: str = "READ COMMITTED"
) -> tuple[object, object, Envelope, Deliveries]:
    """The winner claims and holds its transaction open before COMMIT until the loser is seen
    blocked on the claim; then it commits (or fails and rolls back)."""
    handlers, name, event = subject.load_handlers(), subject.consumer_name(scenario), subject.make_event(subject.key())
    told = Deliveries()
    loser = _processor(subject, name, handlers, isolation_level=isolation_level, telemetry=told)
    loser_pid = loser.session.connection.info.backend_pid
    claimed = threading.Event()

    def hold(_point: str) -> None:
        claimed.set()
        _wait_until_blocked_on_a_lock(subject, loser_pid)
        if winner_rolls_back:
            raise NonRetryable("the winner fails once the loser waits")

    faults = FaultPoints()
    faults.arm("before_commit", hold)
    winner = _processor(subject, name, handlers, faults, isolation_level)
    results: dict[str, object] = {}

    def run(label: str, processor: MessageProcessor) -> None:
        try:
            results[label] = processor.process(event)
        except (TerminalFailure, ContractViolation) as failure:
            results[label] = failure

    first = threading.Thread(target=run, args=("winner", winner))
    first.start()
    expect(claimed.wait(15), "the first delivery never reached its commit")
    second = threading.Thread(target=run, args=("loser", loser))
    second.start()
    first.join(60)
    second.join(60)
    winner.close()
    loser.close()
    return results.get("winner"), results.get("loser"), event, told


def sequential_duplicate(subject: Subject) -> None:
    processor = _processor(subject, subject.consumer_name("sequential"), subject.load_handlers())
    event = subject.make_event(subject.key())
    try:
        outcomes = [processor.process(event), processor.process(event)]
    finally:
        processor.close()
    expect(outcomes == [Outcome.APPLIED, Outcome.DUPLICATE], f"two deliveries gave {outcomes}, not applied, duplicate")
    expect(
        subject.effects_of(event) == 1, f"the effect is there {subject.effects_of(event)} times after two deliveries"
    )


def deliver_at_once(
    make: Callable[[FaultPoints], MessageProcessor], event: Envelope, at: str = "before_claim", copies: int = 2
) -> list[Outcome]:
    """The same event given to `copies` processors at once, each on its own connection (`make`
    builds one with the fault points it is given): each is held at the fault point `at` until
    all have reached it, so none has decided anything before the others arrive. Their outcomes,
    in the order they came; the processors are closed after."""
    all_there = threading.Barrier(copies, timeout=15)
    processors = []
    for _ in range(copies):
        faults = FaultPoints()
        faults.arm(at, lambda _point: all_there.wait())
        processors.append(make(faults))
    outcomes: list[Outcome] = []
    threads = [threading.Thread(target=lambda p=p: outcomes.append(p.process(event))) for p in processors]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    for processor in processors:
        processor.close()
    return outcomes


def two_connections_racing(subject: Subject) -> None:
    handlers, name, event = subject.load_handlers(), subject.consumer_name("racing"), subject.make_event(subject.key())
    outcomes = deliver_at_once(lambda faults: _processor(subject, name, handlers, faults), event)
    expect(sorted(outcomes) == [Outcome.APPLIED, Outcome.DUPLICATE], f"two racing deliveries gave {outcomes}")
    expect(subject.effects_of(event) == 1, f"the effect is there {subject.effects_of(event)} times after the race")


def winner_commits(subject: Subject) -> None:
    winner, loser, event, _ = _race(subject, "winner-commits", winner_rolls_back=False)
    expect((winner, loser) == (Outcome.APPLIED, Outcome.DUPLICATE), f"winner {winner}, loser {loser}")
    expect(subject.effects_of(event) == 1, f"the effect is there {subject.effects_of(event)} times")


def winner_rolls_back(subject: Subject) -> None:
    winner, loser, event, _ = _race(subject, "winner-rolls-back", winner_rolls_back=True)
    expect(isinstance(winner, TerminalFailure), f"the failing winner gave {winner}")
    expect(loser is Outcome.APPLIED, f"the waiting loser gave {loser}, not applied, after the winner rolled back")
    expect(subject.effects_of(event) == 1, f"the effect is there {subject.effects_of(event)} times")


def two_consumer_names(subject: Subject) -> None:
    """Markers are per consumer: a second consumer of the same message applies it too, once."""
    handlers, event = subject.load_handlers(), subject.make_event(subject.key())
    names = [subject.consumer_name("first"), subject.consumer_name("second")]
    for name in names:
        processor = _processor(subject, name, handlers)
        try:
            outcomes = [processor.process(event), processor.process(event)]
        finally:
            processor.close()
        expect(outcomes == [Outcome.APPLIED, Outcome.DUPLICATE], f"{name}: {outcomes}")
        expect(subject.markers_of(name, event) == 1, f"{name} holds {subject.markers_of(name, event)} markers")


def crash_after_commit_before_ack(subject: Subject) -> None:
    """A real process crashes after COMMIT, before the offset is stored; Kafka redelivers the
    message to its restart, which counts it a duplicate."""
    name = subject.consumer_name("crash")
    event, sentinel = subject.make_event(subject.key()), subject.make_event(subject.key())
    topics = kafka.new_topics(subject.bootstrap_servers, name)  # one partition: the sentinel comes after
    kafka.publish(subject.bootstrap_servers, topics.events, [event.to_json(), sentinel.to_json()])
    crashing = kafka.ConsumerProcess(subject, name, topics, EO_FAULTS="after_commit_before_ack=crash")
    code = crashing.wait(90)
    expect(
        code == kafka.CRASH_EXIT_CODE, f"the consumer exited {code}, not with the injected crash:\n{crashing.tail()}"
    )
    expect(subject.effects_of(event) == 1, "the crash came after COMMIT, yet the effect is not there")
    restarted = kafka.ConsumerProcess(subject, name, topics)
    try:
        kafka.wait_for(
            lambda: bool(restarted.outcomes_for(sentinel.message_id)) and subject.effects_of(sentinel) == 1,
            90,
            "the restarted consumer to apply the message after the redelivered one",
        )
    finally:
        restarted.stop()
    seen = restarted.outcomes_for(event.message_id)
    expect(seen[:1] == ["duplicate"], f"the redelivery gave {seen}, not a duplicate:\n{restarted.tail()}")
    expect(subject.effects_of(event) == 1, f"the effect is there {subject.effects_of(event)} times after the crash")


def _serialization_failure(subject: Subject, isolation_level: str) -> None:
    """The loser's claim meets the winner's committed marker, invisible to its snapshot: SQLSTATE
    40001. The whole transaction is retried under the same message id, and is then a duplicate."""
    winner, loser, event, told = _race(subject, "40001", False, isolation_level)
    expect((winner, loser) == (Outcome.APPLIED, Outcome.DUPLICATE), f"winner {winner}, loser {loser}")
    expect("SerializationFailure" in told.error_classes(), f"no 40001 was retried (saw {told.error_classes()})")
    expect(subject.effects_of(event) == 1, f"the effect is there {subject.effects_of(event)} times")


def serialization_failure_repeatable_read(subject: Subject) -> None:
    _serialization_failure(subject, "REPEATABLE READ")


def serialization_failure_serializable(subject: Subject) -> None:
    _serialization_failure(subject, "SERIALIZABLE")


def semantic_duplicate(subject: Subject) -> None:
    """Property: the same business fact under new message ids passes the marker; the handler's
    business key must stop it, and it announces nothing new: however many such copies come, and
    whenever they say they occurred, one effect and no new outbox row."""
    same_fact = subject.same_fact
    if same_fact is None:
        raise NotDeclared("declare Subject.same_fact to run the semantic-duplicate scenario")
    from hypothesis import given, settings
    from hypothesis import strategies as st

    processor = _processor(subject, subject.consumer_name("semantic"), subject.load_handlers())

    @settings(max_examples=EXAMPLES // 2, deadline=None, database=None)
    @given(shifts=st.lists(st.integers(-86_400, 86_400), min_size=1, max_size=3))
    def one_decision_per_fact(shifts: list[int]) -> None:
        first = subject.make_event(subject.key())
        processor.process(first)
        announced = subject.announcements_of(first.key)
        for shift in shifts:
            again = same_fact(first)
            expect(again.message_id != first.message_id, "same_fact must give the fact a new message id")
            processor.process(replace(again, occurred_at=again.occurred_at + timedelta(seconds=shift)))
        effects = subject.effects_of(first)
        copies = len(shifts) + 1
        expect(effects == 1, f"one business fact delivered under {copies} ids has its effect {effects} times")
        more = subject.announcements_of(first.key) - announced
        expect(more == 0, f"one business fact delivered under {copies} ids announced {more} more outbox row(s)")

    try:
        one_decision_per_fact()
    finally:
        processor.close()


EXAMPLES = 20
"""Examples each property draws (Hypothesis's profile decides whether they are the same each run)."""
COPIED_FIELDS: tuple[str, ...] | None = None
"""The fields a copy may change (None: every one); the suite's own tests narrow it."""


def copy_with_other_content(subject: Subject) -> None:
    """Property: a copy of an applied message under the same id, with any other fields changed
    (occurred_at, payload, type, version, key, trace id, extra envelope fields, the record's key or
    headers), is a duplicate counted apart with exactly those fields named: one marker, one effect,
    no new outbox row. Tried alone, in a batch, and found ahead of a run of redeliveries."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from .copies import CONTENT_FIELDS, Record, copy_changes, copy_of, fields_of

    name, told = subject.consumer_name("copies"), Deliveries()
    processor = _processor(subject, name, subject.load_handlers(), telemetry=told)

    fields = COPIED_FIELDS or CONTENT_FIELDS

    @settings(max_examples=EXAMPLES, deadline=None, database=None)
    @given(changes=copy_changes(fields), path=st.sampled_from(("alone", "in a batch", "found ahead")))
    def a_copy_is_a_duplicate(changes: list[Any], path: str) -> None:
        event = subject.make_event(subject.key())
        original = Record.of(event)
        expect(processor.process(original.decoded()) is Outcome.APPLIED, "the original was not applied")
        announced = subject.announcements_of(event.key)
        copy = copy_of(original, changes).decoded()
        told.told.clear()
        if path == "alone":
            outcome: object = processor.process(copy)
        elif path == "in a batch":
            outcome = processor.process_batch([copy, subject.make_event(subject.key())]).results[0]
        elif processor.duplicates_ahead([copy]):
            outcome = next((d.get("outcome") for d in told.told if d.get("message_id") == copy.message_id), None)
        else:  # not found ahead: it takes its path, as in the Kafka loop
            outcome = processor.process(copy)
        changed = sorted(fields_of(changes))
        expect(
            outcome == Outcome.DUPLICATE_WITH_DIFFERENT_CONTENT,
            f"a copy changing {changed}, {path}, gave {outcome}, not a duplicate with different content",
        )
        named = [sorted(d.get("differing_fields") or []) for d in told.told if d.get("message_id") == copy.message_id]
        expect(named == [changed], f"a copy changing {changed}, {path}, was told with differing fields {named}")
        markers, effects = subject.markers_of(name, event), subject.effects_of(event)
        expect((markers, effects) == (1, 1), f"a copy changing {changed}: {markers} marker(s), {effects} effect(s)")
        again = subject.announcements_of(event.key)
        expect(again == announced, f"a copy changing {changed} added {again - announced} outbox row(s)")

    try:
        a_copy_is_a_duplicate()
    finally:
        processor.close()


def out_of_order(subject: Subject) -> None:
    """A key's events delivered in reverse end in the state the written order gives."""
    if subject.in_order is None or subject.state is None:
        raise NotDeclared("declare Subject.in_order and Subject.state to run the out-of-order scenario")
    processor = _processor(subject, subject.consumer_name("order"), subject.load_handlers())
    written, reversed_key = subject.key(), subject.key()
    try:
        for event in subject.in_order(written):
            _settle(processor, event)
        for event in reversed(list(subject.in_order(reversed_key))):
            _settle(processor, event)
    finally:
        processor.close()
    with subject.connect() as connection:
        in_order, out_of_order = subject.state(connection, written), subject.state(connection, reversed_key)
    expect(in_order == out_of_order, f"in order the state is {in_order!r}; delivered in reverse, {out_of_order!r}")


def _settle(processor: MessageProcessor, event: Envelope) -> None:
    try:
        processor.process(event)
    except TerminalFailure as failure:  # a handler may refuse an event it cannot apply yet
        raise ContractViolation(f"{event.type} out of order was dead-lettered ({failure}), not settled") from None


def poison(subject: Subject) -> None:
    """An undecodable message is dead-lettered with its reason and acknowledged; the next
    message on its partition is applied."""
    name = subject.consumer_name("poison")
    topics = kafka.new_topics(subject.bootstrap_servers, name)
    good = subject.make_event(subject.key())
    kafka.publish(subject.bootstrap_servers, topics.events, [b'{"not": "an envelope"', good.to_json()])
    handled = kafka.run_loop(subject, name, topics, until_handled=2)
    expect(handled == 2, f"the loop acknowledged {handled} of the 2 messages")
    expect(subject.effects_of(good) == 1, "the message after the poison was not applied")
    reasons = kafka.dead_letter_reasons(subject.bootstrap_servers, topics.dead_letters, 1)
    expect(len(reasons) == 1 and bool(reasons[0]), f"the poison's dead letter has reasons {reasons}")


AnySubject = TypeVar("AnySubject", bound=Tables)


@dataclass(frozen=True)
class ScenarioOf(Generic[AnySubject]):
    """One scenario, for a subject in process (Subject) or from outside (ProcessSubject)."""

    name: str
    run_on: Callable[[AnySubject], None]

    def run(self, subject: AnySubject) -> None:
        subject.migrate()
        try:
            self.run_on(subject)
        except psycopg.OperationalError as error:
            raise ContractViolation(f"{self.name}: the database did not answer: {error}") from error

    def __str__(self) -> str:
        return self.name


ORDER = (
    "sequential_duplicate",
    "two_connections_racing",
    "winner_commits",
    "winner_rolls_back",
    "two_consumer_names",
    "crash_after_commit_before_ack",
    "serialization_failure_repeatable_read",
    "serialization_failure_serializable",
    "copy_with_other_content",
    "semantic_duplicate",
    "out_of_order",
    "poison",
)
"""Every scenario, in the order both suites run them: the reference's eight, then a copy with
other content, a semantic duplicate, out-of-order delivery and poison. The in-process suite
(here) and the black-box suite (black_box.py) each define a function of each name."""


def named(functions: Mapping[str, Any]) -> tuple[ScenarioOf[AnySubject], ...]:
    """The scenarios of ORDER, each the function of its name in `functions` (a suite module's
    globals), named for people (`winner_commits` is `winner-commits`)."""
    return tuple(ScenarioOf(name.replace("_", "-"), functions[name]) for name in ORDER)


Scenario = ScenarioOf[Subject]
"""A scenario of the in-process suite."""

SCENARIOS: tuple[Scenario, ...] = named(globals())
"""The in-process suite's scenarios, in ORDER."""
