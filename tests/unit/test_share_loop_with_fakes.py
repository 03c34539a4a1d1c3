"""A share-group member's acknowledgements with a fake client and scripted paths: every record of
a poll acknowledged once, before the next poll; ACCEPT only after its commit, REJECT only after its
dead letter, RELEASE for all that follows a record the database could not take, but on a record's
last delivery its dead letter and REJECT. (The integration
tests run the member against the real broker.)"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import psycopg
from confluent_kafka import AcknowledgeType
from hypothesis import given, settings
from hypothesis import strategies as st

from effectively_once.consumer.processor import MessageProcessor, NonRetryable, ProcessorConfig
from effectively_once.consumer.share_loop import DELIVERY_LIMIT, ShareGroupLoop, ShareLoopConfig
from effectively_once.dead_letters import DeadLetterUnconfirmed
from effectively_once.envelope import Envelope
from effectively_once.outcomes import Outcome
from tests.support.fake_consumer import (
    FakeConnection,
    FakeDeadLetters,
    FakeMessage,
    FakeShareConsumer,
    ScriptedPath,
    Step,
    no_sleep,
)

TOPIC = "things"
FATES: dict[str, Step] = {
    "applied": Outcome.APPLIED,
    "duplicate": Outcome.DUPLICATE,
    "poison": NonRetryable("poison"),
    "gone": psycopg.errors.ConnectionFailure("gone"),
}
EXPECTED = {"applied": AcknowledgeType.ACCEPT, "duplicate": AcknowledgeType.ACCEPT, "poison": AcknowledgeType.REJECT}


def _member(script: dict[str, list[Step]], batch_size: int) -> tuple[ShareGroupLoop, FakeDeadLetters]:
    processor = MessageProcessor(
        ProcessorConfig("fake-share-v1"),
        connect=FakeConnection,  # type: ignore[arg-type]
        handlers={"Thing": lambda event, connection: None},
        release=lambda connection: None,
        sleep=no_sleep,
        path=ScriptedPath(script),
    )
    dead = FakeDeadLetters()
    member = ShareGroupLoop(
        ShareLoopConfig(
            "fake:9092", (TOPIC,), "fake-share-v1.share", batch_size=batch_size, retry_backoff_cap_seconds=0
        ),
        processor,
        dead,  # type: ignore[arg-type]
        consumer_factory=FakeShareConsumer,  # type: ignore[arg-type]
    )
    return member, dead


@settings(max_examples=80)
@given(
    fates=st.lists(st.tuples(st.integers(0, 2), st.sampled_from(list(FATES))), min_size=1, max_size=25),
    batch_size=st.sampled_from([1, 3, 100]),
)
def test_each_record_is_acknowledged_once_and_only_as_what_became_of_it(
    fates: list[tuple[int, str]], batch_size: int
) -> None:
    script: dict[str, list[Step]] = {}
    messages: list[FakeMessage] = []
    for offset, (partition, fate) in enumerate(fates):
        event = Envelope.new("Thing", f"k{offset}", {"n": 1})
        script[event.message_id] = [FATES[fate]]
        messages.append(FakeMessage(TOPIC, partition, offset, event.to_json()))
    member, dead = _member(script, batch_size)
    member.handle(messages)  # type: ignore[arg-type]
    client: FakeShareConsumer = member._consumer  # type: ignore[assignment]

    assert sorted((p, o) for p, o, _ in client.acknowledged) == sorted((m.partition(), m.offset()) for m in messages)
    assert client.sends == 1 and client.pending == 0, "the poll's acknowledgements are sent before the next poll"
    given_as = {offset: ack for _, offset, ack in client.acknowledged}
    names = [fate for _, fate in fates]
    # A batch that fails falls back to one record at a time: what came before the first record the
    # database could not take is acknowledged by its fate, and that record and all after it released.
    released_from = names.index("gone") if "gone" in names else len(names)
    for offset, fate in enumerate(names):
        if offset >= released_from:
            assert given_as[offset] == AcknowledgeType.RELEASE, (offset, fate)
        else:
            assert given_as[offset] == EXPECTED[fate], (offset, fate)
    lettered = {message_id for message_id, _ in dead.letters}
    rejected = {offset for offset, ack in given_as.items() if ack == AcknowledgeType.REJECT}
    assert len(lettered) == len(rejected), "a record is rejected only once its dead letter is confirmed"


class UnconfirmedDeadLetters(FakeDeadLetters):
    """A dead-letter topic whose broker never confirms."""

    def publish(self, message: Any, reason: str, error_class: str, error_text: str, message_id: str | None) -> None:
        raise DeadLetterUnconfirmed("dead letter to dlq.fake not confirmed: timed out")


@settings(max_examples=40)
@given(deliveries=st.integers(1, 10), limit=st.integers(2, 10), confirmed=st.booleans())
def test_a_record_the_database_cannot_take_is_dead_lettered_on_its_last_delivery_not_archived(
    deliveries: int, limit: int, confirmed: bool
) -> None:
    event = Envelope.new("Thing", "k", {"n": 1})
    member, _ = _member({event.message_id: [FATES["gone"]]}, batch_size=1)
    member.config = replace(member.config, delivery_limit=limit)
    member.dead_letters = FakeDeadLetters() if confirmed else UnconfirmedDeadLetters()  # type: ignore[assignment]
    member.handle([FakeMessage(TOPIC, 0, 7, event.to_json(), deliveries=deliveries)])  # type: ignore[list-item]
    client: FakeShareConsumer = member._consumer  # type: ignore[assignment]

    last = deliveries >= limit
    lettered = member.dead_letters.letters if confirmed else []  # type: ignore[attr-defined]
    assert lettered == ([(event.message_id, DELIVERY_LIMIT)] if last and confirmed else [])
    expected = AcknowledgeType.REJECT if last and confirmed else AcknowledgeType.RELEASE
    assert client.acknowledged == [(0, 7, expected)]
