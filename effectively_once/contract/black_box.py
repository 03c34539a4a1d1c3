"""The contract suite in black-box mode: the same scenarios, driving a consumer process in any
language only through Kafka (what it reads), the database (what it wrote) and its control
endpoint (fault points to arm, metrics to read). Nothing of the consumer is imported.

How a race is staged without timing: the winner's process is armed to stall at `before_commit`
(its marker claimed, its transaction open) until the suite disarms it; the loser, a second
process of the same consumer name in a group of its own, is then given the same message on a
topic of its own, and the suite watches pg_stat_activity until the loser's session (found by its
application_name) waits on a lock: the marker's unique index. Then the winner commits (DELETE
/faults) or dies (SIGKILL, so PostgreSQL rolls it back).
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

from ..envelope import Envelope
from . import kafka
from .process_subject import ProcessSubject
from .running import ACKNOWLEDGED, RunningConsumer, wait_for
from .scenarios import ContractViolation, NotDeclared, ScenarioOf, expect, named

CRASH_EXIT_CODE = kafka.CRASH_EXIT_CODE


def _wait_until_waiting_on_a_lock(subject: ProcessSubject, loser: RunningConsumer, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    with subject.connect(autocommit=True) as observer:
        while time.monotonic() < deadline:
            row = observer.execute(
                "SELECT 1 FROM pg_stat_activity WHERE application_name = %s AND wait_event_type = 'Lock'",
                (loser.process_name,),
            ).fetchone()
            if row:
                return
            time.sleep(0.02)
    raise ContractViolation(
        f"the second delivery never waited on the marker's unique index (no session of "
        f"application_name {loser.process_name!r} waited on a lock)\n{loser.tail()}"
    )


def _race(
    subject: ProcessSubject, scenario: str, winner_rolls_back: bool, isolation_level: str = "READ COMMITTED"
) -> tuple[Counter[str], Counter[str], int, Envelope]:
    """The winner's and the loser's outcomes (the winner's empty when it was killed), the
    loser's SerializationFailure retries, and the event."""
    name = subject.consumer_name(scenario)
    first, second = kafka.new_topics(subject.bootstrap_servers, name), kafka.new_topics(subject.bootstrap_servers, name)
    event = subject.make_event(subject.key())
    level = {"CONSUMER_ISOLATION_LEVEL": isolation_level}
    with (
        RunningConsumer(subject, name, [first.events], first.dead_letters, "winner", **level) as winner,
        RunningConsumer(subject, name, [second.events], second.dead_letters, "loser", **level) as loser,
    ):
        winner.arm("before_commit", "stall", stall_seconds=120)
        kafka.publish(subject.bootstrap_servers, first.events, [event.to_json()])
        wait_for(lambda: winner.fired("before_commit") == 1, 60, "the winner to hold its claim open", winner.tail)
        kafka.publish(subject.bootstrap_servers, second.events, [event.to_json()])
        _wait_until_waiting_on_a_lock(subject, loser)
        if winner_rolls_back:
            winner.kill()
            won: Counter[str] = Counter()
        else:
            winner.release()
            won = winner.wait_acknowledged(1)
        lost = loser.wait_acknowledged(1)
        retried = loser.retries("SerializationFailure")
    return won, lost, retried, event


def sequential_duplicate(subject: ProcessSubject) -> None:
    name = subject.consumer_name("sequential")
    topics = kafka.new_topics(subject.bootstrap_servers, name)
    event = subject.make_event(subject.key())
    kafka.publish(subject.bootstrap_servers, topics.events, [event.to_json(), event.to_json()])
    with RunningConsumer(subject, name, [topics.events], topics.dead_letters) as consumer:
        outcomes = consumer.wait_acknowledged(2)
    expect((outcomes["applied"], outcomes["duplicate"]) == (1, 1), f"two deliveries gave {dict(outcomes)}")
    expect(subject.effects_of(event) == 1, f"the effect is there {subject.effects_of(event)} times")


def two_connections_racing(subject: ProcessSubject) -> None:
    """Two processes of one consumer (groups of their own) take the same message at once: both
    stall before the claim until both are there, then go together."""
    name = subject.consumer_name("racing")
    topics = kafka.new_topics(subject.bootstrap_servers, name)
    event = subject.make_event(subject.key())
    with (
        RunningConsumer(subject, name, [topics.events], topics.dead_letters, "one") as one,
        RunningConsumer(subject, name, [topics.events], topics.dead_letters, "two") as two,
    ):
        for consumer in (one, two):
            consumer.arm("before_claim", "stall", stall_seconds=120)
        kafka.publish(subject.bootstrap_servers, topics.events, [event.to_json()])
        wait_for(lambda: one.fired("before_claim") + two.fired("before_claim") == 2, 60, "both to reach the claim")
        one.release()
        two.release()
        outcomes = one.wait_acknowledged(1) + two.wait_acknowledged(1)
    expect((outcomes["applied"], outcomes["duplicate"]) == (1, 1), f"two racing deliveries gave {dict(outcomes)}")
    expect(subject.effects_of(event) == 1, f"the effect is there {subject.effects_of(event)} times after the race")


def winner_commits(subject: ProcessSubject) -> None:
    won, lost, _, event = _race(subject, "winner-commits", winner_rolls_back=False)
    expect(won["applied"] == 1 and lost["duplicate"] == 1, f"winner {dict(won)}, loser {dict(lost)}")
    expect(subject.effects_of(event) == 1, f"the effect is there {subject.effects_of(event)} times")


def winner_rolls_back(subject: ProcessSubject) -> None:
    """The winner is killed while the loser waits: PostgreSQL rolls it back and the loser claims."""
    _, lost, _, event = _race(subject, "winner-rolls-back", winner_rolls_back=True)
    expect(lost["applied"] == 1, f"the waiting loser gave {dict(lost)}, not applied, after the winner died")
    expect(subject.effects_of(event) == 1, f"the effect is there {subject.effects_of(event)} times")


def two_consumer_names(subject: ProcessSubject) -> None:
    """Markers are per consumer: a second consumer of the same message applies it too, once."""
    names = [subject.consumer_name("first"), subject.consumer_name("second")]
    topics = kafka.new_topics(subject.bootstrap_servers, names[0])
    event = subject.make_event(subject.key())
    kafka.publish(subject.bootstrap_servers, topics.events, [event.to_json(), event.to_json()])
    for name in names:
        with RunningConsumer(subject, name, [topics.events], topics.dead_letters) as consumer:
            outcomes = consumer.wait_acknowledged(2)
        expect((outcomes["applied"], outcomes["duplicate"]) == (1, 1), f"{name}: {dict(outcomes)}")
        expect(subject.markers_of(name, event) == 1, f"{name} holds {subject.markers_of(name, event)} markers")


def crash_after_commit_before_ack(subject: ProcessSubject) -> None:
    """Armed on the control endpoint, the process really exits after COMMIT, before the offset is
    stored; its restart is redelivered the message and counts it a duplicate."""
    name = subject.consumer_name("crash")
    topics = kafka.new_topics(subject.bootstrap_servers, name)
    event, sentinel = subject.make_event(subject.key()), subject.make_event(subject.key())
    crashing = RunningConsumer(subject, name, [topics.events], topics.dead_letters)
    try:
        crashing.arm("after_commit_before_ack", "crash")
        kafka.publish(subject.bootstrap_servers, topics.events, [event.to_json(), sentinel.to_json()])
        code = crashing.wait(90)
    finally:
        crashing.stop()
    expect(code == CRASH_EXIT_CODE, f"the consumer exited {code}, not {CRASH_EXIT_CODE}:\n{crashing.tail()}")
    expect(subject.effects_of(event) == 1, "the crash came after COMMIT, yet the effect is not there")
    with RunningConsumer(subject, name, [topics.events], topics.dead_letters) as restarted:
        outcomes = restarted.wait_acknowledged(2)
    expect(outcomes["duplicate"] >= 1, f"the restart gave {dict(outcomes)}: the redelivery was no duplicate")
    expect(subject.effects_of(event) == 1, f"the effect is there {subject.effects_of(event)} times after the crash")
    expect(subject.effects_of(sentinel) == 1, "the message after the redelivered one was not applied")


def _serialization_failure(subject: ProcessSubject, isolation_level: str) -> None:
    """Under snapshot isolation the loser's claim meets a committed marker its snapshot cannot
    see: SQLSTATE 40001. The whole transaction is retried, and is then a duplicate."""
    won, lost, retried, event = _race(subject, "40001", False, isolation_level)
    expect(won["applied"] == 1 and lost["duplicate"] == 1, f"winner {dict(won)}, loser {dict(lost)}")
    expect(retried >= 1, "the loser counted no SerializationFailure retry (eo_consumer_retries_total)")
    expect(subject.effects_of(event) == 1, f"the effect is there {subject.effects_of(event)} times")


def serialization_failure_repeatable_read(subject: ProcessSubject) -> None:
    _serialization_failure(subject, "REPEATABLE READ")


def serialization_failure_serializable(subject: ProcessSubject) -> None:
    _serialization_failure(subject, "SERIALIZABLE")


EXAMPLES = 10
"""Examples each property draws: each is a round trip through Kafka and the process."""
COPIED_FIELDS: tuple[str, ...] | None = None
"""The fields a copy may change (None: every one); the suite's own tests narrow it."""


def copy_with_other_content(subject: ProcessSubject) -> None:
    """Property: a copy of an applied message under the same id (envelope and header), with any
    other fields changed, is counted as a duplicate with different content: one marker, one
    effect, no new outbox row. The process runs throughout; each example publishes a message and
    its copy."""
    from hypothesis import Phase, given, settings

    from .copies import CONTENT_FIELDS, Record, copy_changes, copy_of, fields_of

    name = subject.consumer_name("copies")
    topics = kafka.new_topics(subject.bootstrap_servers, name)
    with RunningConsumer(subject, name, [topics.events], topics.dead_letters) as consumer:

        @settings(max_examples=EXAMPLES, deadline=None, database=None, phases=[Phase.explicit, Phase.generate])
        @given(changes=copy_changes(COPIED_FIELDS or CONTENT_FIELDS))
        def a_copy_is_a_duplicate(changes: list[Any]) -> None:  # each example a round trip: no shrinking
            before = consumer.outcomes()
            event = subject.make_event(subject.key())
            original = Record.of(event)
            kafka.publish_records(subject.bootstrap_servers, topics.events, [original])
            consumer.wait_acknowledged(sum(before[o] for o in ACKNOWLEDGED) + 1)
            announced = subject.announcements_of(event.key)
            kafka.publish_records(subject.bootstrap_servers, topics.events, [copy_of(original, changes)])
            after = consumer.wait_acknowledged(sum(before[o] for o in ACKNOWLEDGED) + 2) - before
            changed = sorted(fields_of(changes))
            expect(
                dict(after) == {"applied": 1, "duplicate_with_different_content": 1},
                f"a message and its copy changing {changed} gave {dict(after)}",
            )
            markers, effects = subject.markers_of(name, event), subject.effects_of(event)
            expect((markers, effects) == (1, 1), f"a copy changing {changed}: {markers} marker(s), {effects} effect(s)")
            again = subject.announcements_of(event.key)
            expect(again == announced, f"a copy changing {changed} added {again - announced} outbox row(s)")

        a_copy_is_a_duplicate()


def semantic_duplicate(subject: ProcessSubject) -> None:
    """The same business fact under new message ids: one effect, and nothing new announced."""
    if subject.same_fact is None:
        raise NotDeclared("declare ProcessSubject.same_fact to run the semantic-duplicate scenario")
    name = subject.consumer_name("semantic")
    topics = kafka.new_topics(subject.bootstrap_servers, name)
    first = subject.make_event(subject.key())
    again = [subject.same_fact(first) for _ in range(2)]
    expect(all(copy.message_id != first.message_id for copy in again), "same_fact must give the fact a new message id")
    with RunningConsumer(subject, name, [topics.events], topics.dead_letters) as consumer:
        kafka.publish(subject.bootstrap_servers, topics.events, [first.to_json()])
        consumer.wait_acknowledged(1)
        announced = subject.announcements_of(first.key)
        kafka.publish(subject.bootstrap_servers, topics.events, [copy.to_json() for copy in again])
        consumer.wait_acknowledged(3)
    effects = subject.effects_of(first)
    expect(effects == 1, f"one business fact delivered under three ids has its effect {effects} times")
    more = subject.announcements_of(first.key) - announced
    expect(more == 0, f"one business fact delivered under three ids announced {more} more outbox row(s)")


def out_of_order(subject: ProcessSubject) -> None:
    if subject.in_order is None or subject.state is None:
        raise NotDeclared("declare ProcessSubject.in_order and ProcessSubject.state to run the out-of-order scenario")
    name = subject.consumer_name("order")
    topics = kafka.new_topics(subject.bootstrap_servers, name)
    written, reversed_key = subject.key(), subject.key()
    events = list(subject.in_order(written)) + list(reversed(list(subject.in_order(reversed_key))))
    kafka.publish(subject.bootstrap_servers, topics.events, [event.to_json() for event in events])
    with RunningConsumer(subject, name, [topics.events], topics.dead_letters) as consumer:
        outcomes = consumer.wait_acknowledged(len(events))
    expect(outcomes["terminal_failure"] == 0, f"an event out of order was dead-lettered, not settled: {dict(outcomes)}")
    with subject.connect() as connection:
        in_order, out_of_order = subject.state(connection, written), subject.state(connection, reversed_key)
    expect(in_order == out_of_order, f"in order the state is {in_order!r}; delivered in reverse, {out_of_order!r}")


def poison(subject: ProcessSubject) -> None:
    """An undecodable message is dead-lettered with its reason and where it came from, then
    acknowledged; the next message on its partition is applied."""
    name = subject.consumer_name("poison")
    topics = kafka.new_topics(subject.bootstrap_servers, name)
    good = subject.make_event(subject.key())
    kafka.publish(subject.bootstrap_servers, topics.events, [b'{"not": "an envelope"', good.to_json()])
    with RunningConsumer(subject, name, [topics.events], topics.dead_letters) as consumer:
        outcomes = consumer.wait_acknowledged(2)
    expect(outcomes["terminal_failure"] == 1, f"the poison gave {dict(outcomes)}, not one terminal failure")
    expect(subject.effects_of(good) == 1, "the message after the poison was not applied")
    [letter] = kafka.dead_letters(subject.bootstrap_servers, topics.dead_letters, 1) or [{}]
    expected = {"reason": "undecodable", "consumer": name, "original-topic": topics.events, "original-offset": "0"}
    seen = {header: letter.get(header) for header in expected}
    expect(seen == expected, f"the dead letter's headers are {seen}, not {expected}")


BlackBoxScenario = ScenarioOf[ProcessSubject]
"""A scenario of the black-box suite."""

BLACK_BOX_SCENARIOS: tuple[BlackBoxScenario, ...] = named(globals())
"""The in-process suite's scenarios, by the same names and in the same ORDER, driving a process
from outside."""
