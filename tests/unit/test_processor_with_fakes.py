"""The processor's decisions, with a scripted path and a connection that runs no SQL: how many
times a message is tried, when it is dead-lettered, when nothing is acknowledged, and how a
batch that fails falls back to one message at a time. (tests/integration runs the same on real
PostgreSQL.)"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st

from effectively_once.consumer.processor import (
    MessageProcessor,
    NonRetryable,
    ProcessorConfig,
    RetryLater,
    TerminalFailure,
)
from effectively_once.envelope import Envelope
from effectively_once.outcomes import Outcome
from tests.support.fake_consumer import FakeConnection, ScriptedPath, envelopes, no_sleep

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def _processor(
    path: ScriptedPath, horizon: timedelta | None = None, connections: list[FakeConnection] | None = None
) -> MessageProcessor:
    made = connections if connections is not None else []

    def connect() -> FakeConnection:
        made.append(FakeConnection())
        return made[-1]

    return MessageProcessor(
        ProcessorConfig("fake-v1", dedup_horizon=horizon),
        connect=connect,  # type: ignore[arg-type]
        handlers={"Thing": lambda event, connection: None},
        release=lambda connection: None,
        sleep=no_sleep,
        clock=lambda: NOW,
        path=path,
    )


def _event(at: datetime = NOW) -> Envelope:
    return Envelope.new("Thing", "order-1", {"n": 1}, at=at)


@given(failures=st.integers(min_value=0, max_value=12))
def test_a_serialization_failure_is_retried_whole_up_to_the_bound_then_dead_lettered(failures: int) -> None:
    event = _event()
    path = ScriptedPath(
        {event.message_id: [*[psycopg.errors.SerializationFailure("40001")] * failures, Outcome.APPLIED]}
    )
    bound = ProcessorConfig("fake-v1").max_transaction_attempts
    processor = _processor(path)
    if failures < bound:
        assert processor.process(event) is Outcome.APPLIED
        assert path.attempts[event.message_id] == failures + 1
    else:
        with pytest.raises(TerminalFailure, match="transaction_retries_exhausted"):
            processor.process(event)
        assert path.attempts[event.message_id] == bound


@given(failures=st.integers(min_value=0, max_value=6))
def test_a_failing_handler_is_tried_a_bounded_number_of_times(failures: int) -> None:
    event = _event()
    path = ScriptedPath({event.message_id: [*[ValueError("a bug")] * failures, Outcome.APPLIED]})
    bound = ProcessorConfig("fake-v1").max_handler_attempts
    processor = _processor(path)
    if failures < bound:
        assert processor.process(event) is Outcome.APPLIED
    else:
        with pytest.raises(TerminalFailure, match="handler_failed"):
            processor.process(event)
    assert path.attempts[event.message_id] == min(failures + 1, bound)


def test_a_failure_no_retry_can_fix_is_dead_lettered_at_the_first_attempt() -> None:
    event = _event()
    path = ScriptedPath({event.message_id: [NonRetryable("the order is unknown")]})
    with pytest.raises(TerminalFailure, match="handler_failed"):
        _processor(path).process(event)
    assert path.attempts[event.message_id] == 1


@pytest.mark.parametrize(
    "ended",
    [psycopg.errors.AdminShutdown("terminating connection"), psycopg.errors.ConnectionFailure("server closed")],
    ids=["57P01", "08006"],
)
def test_a_session_the_server_ended_acknowledges_nothing_and_the_next_message_gets_a_new_connection(
    ended: psycopg.OperationalError,
) -> None:
    first, second = _event(), _event()
    connections: list[FakeConnection] = []
    processor = _processor(ScriptedPath({first.message_id: [ended]}), connections=connections)
    with pytest.raises(RetryLater):
        processor.process(first)
    assert processor.process(second) is Outcome.APPLIED
    assert len(connections) == 2


@given(age=st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=90)))
def test_a_message_older_than_the_horizon_is_refused_and_never_attempted(age: timedelta) -> None:
    horizon = timedelta(days=30)
    event = _event(at=NOW - age)
    path = ScriptedPath()
    processor = _processor(path, horizon=horizon)
    if age > horizon:
        with pytest.raises(TerminalFailure, match="beyond_dedup_horizon"):
            processor.process(event)
        assert event.message_id not in path.attempts
    else:
        assert processor.process(event) is Outcome.APPLIED


@given(size=st.integers(min_value=2, max_value=30), data=st.data())
def test_a_batch_with_poison_falls_back_one_at_a_time_and_the_rest_apply_once(size: int, data: st.DataObject) -> None:
    events = list(envelopes([f"order-{n}" for n in range(size)]))
    poisoned = data.draw(st.sets(st.sampled_from(range(size)), max_size=size))
    path = ScriptedPath({events[n].message_id: [NonRetryable("poison")] for n in poisoned})
    batch = _processor(path).process_batch(events)
    assert batch.retry_later is None and len(batch.results) == size
    for n, (event, result) in enumerate(zip(events, batch.results, strict=True)):
        if n in poisoned:
            assert isinstance(result, TerminalFailure), n
        else:
            assert result is Outcome.APPLIED and path.attempts[event.message_id] == 1, n
    assert path.batch_attempts == 1


def test_a_batch_stops_where_the_database_went_away_and_leaves_the_rest_for_later() -> None:
    events = list(envelopes(["a", "b", "c", "d"]))
    path = ScriptedPath({events[2].message_id: [psycopg.errors.ConnectionFailure("gone")]}, batches=False)
    batch = _processor(path).process_batch(events)
    assert batch.results == [Outcome.APPLIED, Outcome.APPLIED] and isinstance(batch.retry_later, RetryLater)
    assert events[3].message_id not in path.attempts
