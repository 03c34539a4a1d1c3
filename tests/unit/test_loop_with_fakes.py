"""The Kafka loop's bookkeeping with a fake client and scripted paths: what it stores, where it
seeks back, what it dead-letters, with and without worker lanes, and the ack-first mistake the
lab plugs into its hook. (tests/integration runs the loop against real Kafka.)"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from functools import partial

import psycopg
import pytest
from confluent_kafka import KafkaError, TopicPartition
from hypothesis import given, settings
from hypothesis import strategies as st

from effectively_once.consumer import loop as loop_module
from effectively_once.consumer.deliveries import ClientFailed
from effectively_once.consumer.loop import ConsumerLoop, LoopConfig
from effectively_once.consumer.processor import MessageProcessor, NonRetryable, ProcessorConfig
from effectively_once.envelope import Envelope
from effectively_once.lab.controls import LabControls
from effectively_once.outcomes import Outcome, Strategy
from effectively_once.telemetry import NoTelemetry
from tests.support.fake_consumer import (
    FakeConnection,
    FakeDeadLetters,
    FakeKafkaConsumer,
    FakeMessage,
    ScriptedPath,
    Step,
    no_sleep,
)

TOPIC = "things"
FATES: dict[str, Step] = {
    "applied": Outcome.APPLIED,
    "poison": NonRetryable("poison"),
    "gone": psycopg.errors.ConnectionFailure("gone"),
}


def _processor(script: dict[str, list[Step]], batches: bool = True) -> MessageProcessor:
    path = ScriptedPath(script, batches=batches)
    return MessageProcessor(
        ProcessorConfig("fake-v1"),
        connect=FakeConnection,  # type: ignore[arg-type]
        handlers={"Thing": lambda event, connection: None},
        release=lambda connection: None,
        sleep=no_sleep,
        path=path,
    )


def _running(strategy: Strategy) -> Strategy:
    return strategy


def _loop(
    script: dict[str, list[Step]], workers: int = 1, batch_size: int = 1, lab: LabControls | None = None
) -> tuple[ConsumerLoop, FakeDeadLetters]:
    dead_letters = FakeDeadLetters()
    processors = [_processor(script) for _ in range(workers)]
    loop = ConsumerLoop(
        LoopConfig("fake:9092", (TOPIC,), batch_size=batch_size, retry_backoff_cap_seconds=0),
        processors[0],
        dead_letters,  # type: ignore[arg-type]
        consumer_factory=FakeKafkaConsumer,  # type: ignore[arg-type]
        workers=processors[1:],
        before_transaction=lab.before_transaction if lab else None,
    )
    return loop, dead_letters


def _poll(fates: list[tuple[int, str, str]]) -> tuple[list[FakeMessage], dict[str, list[Step]], list[Envelope]]:
    """Messages on partitions (offsets from 0 on each), their events' keys, and their fates."""
    offsets: dict[int, int] = defaultdict(int)
    messages: list[FakeMessage] = []
    script: dict[str, list[Step]] = {}
    events: list[Envelope] = []
    for partition, key, fate in fates:
        event = Envelope.new("Thing", key, {"n": 1})
        events.append(event)
        script[event.message_id] = [FATES[fate]]
        messages.append(FakeMessage(TOPIC, partition, offsets[partition], event.to_json()))
        offsets[partition] += 1
    return messages, script, events


POLLS = st.lists(
    st.tuples(st.integers(0, 2), st.sampled_from(["k1", "k2", "k3", "k4"]), st.sampled_from(list(FATES))),
    min_size=1,
    max_size=25,
)


def _check_offsets(
    client: FakeKafkaConsumer,
    messages: list[FakeMessage],
    events: list[Envelope],
    dead: FakeDeadLetters,
    fates: list[str],
) -> None:
    """On each partition, the stored offset never passes a message that was neither committed nor
    dead-lettered, every message before it was one of those, and what was left is sought back to."""
    lettered = {message_id for message_id, _ in dead.letters}
    for partition in {m.partition() for m in messages}:
        mine = [(m, e, f) for m, e, f in zip(messages, events, fates, strict=True) if m.partition() == partition]
        stored = client.stored.get((TOPIC, partition), 0)
        for message, event, fate in mine[:stored]:
            assert fate == "applied" or event.message_id in lettered, (partition, message.offset(), fate)
        pending = [m for m, _, _ in mine[stored:]]
        if pending:
            assert (TOPIC, partition, pending[0].offset()) in client.sought
    assert all(reason == "handler_failed" for _, reason in dead.letters)


@settings(max_examples=80)
@given(fates=POLLS, batch_size=st.sampled_from([1, 3, 100]))
def test_one_member_stores_only_what_committed_or_was_dead_lettered(
    fates: list[tuple[int, str, str]], batch_size: int
) -> None:
    messages, script, events = _poll(fates)
    loop, dead = _loop(script, batch_size=batch_size)
    loop.handle(messages)  # type: ignore[arg-type]
    client: FakeKafkaConsumer = loop._consumer  # type: ignore[assignment]
    _check_offsets(client, messages, events, dead, [fate for _, _, fate in fates])
    if "gone" not in [fate for _, _, fate in fates]:
        assert loop.handled == len(messages) and not client.sought


@settings(max_examples=60)
@given(fates=POLLS, workers=st.integers(2, 4))
def test_workers_never_store_past_a_gap_and_each_key_keeps_its_order(
    fates: list[tuple[int, str, str]], workers: int
) -> None:
    messages, script, events = _poll(fates)
    loop, dead = _loop(script, workers=workers)
    loop.handle(messages)  # type: ignore[arg-type]
    client: FakeKafkaConsumer = loop._consumer  # type: ignore[assignment]
    _check_offsets(client, messages, events, dead, [fate for _, _, fate in fates])
    attempted = [
        {message_id for message_id in processor.path.attempts}  # type: ignore[attr-defined]
        for processor in loop.processors
    ]
    for key in {event.key for event in events}:  # one key's messages on one worker alone
        assert sum(1 for seen in attempted if any(e.message_id in seen for e in events if e.key == key)) <= 1


def test_a_rewind_seeks_back_to_the_first_message_not_acknowledged_on_each_partition() -> None:
    messages, script, _ = _poll([(0, "k1", "applied"), (0, "k1", "gone"), (1, "k2", "applied"), (0, "k1", "applied")])
    loop, _ = _loop(script)
    loop.handle(messages)  # type: ignore[arg-type]
    client: FakeKafkaConsumer = loop._consumer  # type: ignore[assignment]
    assert client.stored == {(TOPIC, 0): 1}
    assert sorted(client.sought) == [(TOPIC, 0, 1), (TOPIC, 1, 0)]


def test_the_ack_first_mistake_commits_the_offset_before_the_transaction_and_loses_what_failed() -> None:
    messages, script, _ = _poll([(0, "k1", "gone")])
    for strategy, committed in ((Strategy.CORRECT, {}), (Strategy.ACK_BEFORE_COMMIT, {(TOPIC, 0): 1})):
        lab = LabControls("fake-v1", NoTelemetry())
        loop, _ = _loop(script, lab=lab)
        lab.strategy_of = partial(_running, strategy)  # as LabAttachment.runtime ties it to the processor
        loop.handle(messages)  # type: ignore[arg-type]
        client: FakeKafkaConsumer = loop._consumer  # type: ignore[assignment]
        assert client.committed == committed, strategy


class _JoiningConsumer(FakeKafkaConsumer):
    """A client whose group refuses it (a fatal error at each poll) while `refusals` holds a true
    first item (taken); else assigned one partition, whose `message` it delivers; then, when
    `fail_when_drained`, fenced (the same fatal error)."""

    def __init__(
        self, settings: dict[str, object], refusals: list[bool], message: FakeMessage, fail_when_drained: bool
    ) -> None:
        super().__init__(settings)
        self.refused = bool(refusals) and refusals.pop(0)
        self._fail_when_drained = fail_when_drained
        self.closed = False
        self._pending = [message]
        self._on_assign: Callable[..., None] | None = None

    def subscribe(self, topics: list[str], on_assign: Callable[..., None], **callbacks: object) -> None:
        self._on_assign = on_assign

    def consume(self, size: int, timeout: float) -> list[object]:
        return []

    def poll(self, timeout: float) -> object:
        if self.refused:
            return _Refusal()
        if self._on_assign is not None:
            self._on_assign(self, [TopicPartition(TOPIC, 0)])
            self._on_assign = None
        if self._pending:
            return self._pending.pop()
        return _Refusal() if self._fail_when_drained else None

    def close(self) -> None:
        self.closed = True


class _Refusal:
    """The event librdkafka delivers when the broker refuses a static member's instance id."""

    def error(self) -> KafkaError:
        return KafkaError(KafkaError._FATAL, "Fatal error: Broker: The instance ID is still used by another member")

    def topic(self) -> None:
        return None

    def partition(self) -> None:
        return None


def _joining_loop(
    refusals: list[bool], wait: float = 60, fail_when_drained: bool = False
) -> tuple[ConsumerLoop, list[_JoiningConsumer]]:
    event = Envelope.new("Thing", "k1", {"n": 1})
    clients: list[_JoiningConsumer] = []

    def client(settings: dict[str, object]) -> _JoiningConsumer:
        message = FakeMessage(TOPIC, 0, 0, event.to_json())
        clients.append(_JoiningConsumer(settings, refusals, message, fail_when_drained))
        return clients[-1]

    loop = ConsumerLoop(
        LoopConfig("fake:9092", (TOPIC,), refused_join_wait_seconds=wait, refused_join_retry_seconds=0),
        _processor({event.message_id: [Outcome.APPLIED]}),
        FakeDeadLetters(),  # type: ignore[arg-type]
        consumer_factory=client,  # type: ignore[arg-type]
    )
    return loop, clients


@settings(max_examples=20)
@given(refusals=st.integers(0, 5))
def test_a_member_refused_before_its_first_assignment_joins_again_with_a_fresh_client(refusals: int) -> None:
    loop, clients = _joining_loop([True] * refusals)
    loop.run(until=lambda: loop.handled == 1 or len(clients) > refusals + 1)
    assert loop.handled == 1
    assert len(clients) == refusals + 1
    assert all(client.closed for client in clients)
    assert clients[-1].stored == {(TOPIC, 0): 1}


def test_a_member_refused_after_it_was_assigned_ends_with_the_client() -> None:
    loop, clients = _joining_loop([], fail_when_drained=True)  # assigned, consumes, then fenced
    with pytest.raises(ClientFailed):
        loop.run()
    assert loop.handled == 1
    assert len(clients) == 1 and clients[0].closed


def test_a_member_refused_for_longer_than_its_wait_ends() -> None:
    loop, clients = _joining_loop([True] * 100, wait=0)
    with pytest.raises(ClientFailed):
        loop.run()
    assert 1 <= len(clients) <= 2 and clients[-1].closed


class _SilentGroup(_JoiningConsumer):
    """A client its group never answers with an assignment: under the consumer protocol, a member
    given no partition (more members than partitions) hears nothing at all."""

    def poll(self, timeout: float) -> object:
        return None


def test_a_member_is_joining_from_its_start_until_it_is_assigned_however_often_refused() -> None:
    loop, clients = _joining_loop([True, True])
    seen: list[tuple[int, bool]] = []

    def watched() -> bool:
        seen.append((loop.handled, loop.still_joining()))
        return loop.handled == 1

    watched()  # before its first poll too
    loop.run(until=watched)
    assert len(clients) == 3
    assert {joining for handled, joining in seen if handled == 0} == {True}
    assert seen[-1] == (1, False)


def test_a_member_the_group_never_answers_counts_as_joined_after_its_first_join(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(loop_module, "FIRST_JOIN_SECONDS", 0.2)
    loop = ConsumerLoop(
        LoopConfig("fake:9092", (TOPIC,)),
        _processor({}),
        FakeDeadLetters(),  # type: ignore[arg-type]
        consumer_factory=lambda settings: _SilentGroup(settings, [], FakeMessage(TOPIC, 0, 0, b""), False),  # type: ignore[arg-type,return-value]
    )
    started = time.monotonic()  # before the loop subscribes: its first join is no older than this
    seen: list[tuple[float, bool]] = []

    def watched() -> bool:
        seen.append((time.monotonic() - started, loop.still_joining()))
        return seen[-1][0] > 0.9

    loop.run(until=watched)
    assert {joining for elapsed, joining in seen if elapsed < 0.15} == {True}
    # Well past 0.2 s, so that a stall between `started` and the subscription cannot move it.
    assert {joining for elapsed, joining in seen if elapsed > 0.6} == {False}
