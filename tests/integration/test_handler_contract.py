"""A handler cannot break the transaction the marker shares with its change, and a handler that
declares a typed payload never sees one that does not fit. Against real PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field

from effectively_once.consumer.processor import Connection, MessageProcessor, ProcessorConfig, TerminalFailure, path_for
from effectively_once.envelope import Envelope
from effectively_once.outcomes import Outcome, Strategy
from effectively_once.typed_payload import typed
from tests.integration.conftest import ProcessorFactory
from tests.support.hostile_requests import examples
from workbench.ledger import LEDGER_ENTRY, entry, ledger_rows, markers

INSERT = "INSERT INTO ledger (consumer_name, message_id, order_key, amount) VALUES (%s, %s, %s, 1)"


def _breaking(name: str, breaks: Callable[[Connection], object]) -> Callable[[Envelope, Connection], None]:
    def handle(event: Envelope, connection: Connection) -> None:
        connection.execute(INSERT, (name, event.message_id, event.key))
        breaks(connection)

    return handle


BREAKS: dict[str, Callable[[Connection], object]] = {
    "commit()": lambda c: c.commit(),
    "rollback()": lambda c: c.rollback(),
    "setting autocommit": lambda c: setattr(c, "autocommit", True),
    "set_autocommit()": lambda c: c.set_autocommit(True),
    "setting isolation_level": lambda c: setattr(c, "isolation_level", 3),
    "close()": lambda c: c.close(),
}


@pytest.mark.parametrize("how", sorted(BREAKS))
def test_a_handler_that_tries_to_end_the_transaction_fails_its_message_and_leaves_nothing(
    make_processor: ProcessorFactory, runtime_db: str, name: str, how: str
) -> None:
    processor = make_processor(name, {LEDGER_ENTRY: _breaking(name, BREAKS[how])})
    event = entry("order-1")
    with pytest.raises(TerminalFailure) as failure:
        processor.process(event)
    assert failure.value.reason == "handler_broke_transaction" and how in failure.value.error_text
    assert ledger_rows(runtime_db, name, event.message_id) == 0
    assert markers(runtime_db, name, event.message_id) == 0  # the whole attempt rolled back


@pytest.mark.parametrize("statement", ["COMMIT", "ROLLBACK", "END", "abort"])
def test_a_commit_or_rollback_sent_as_sql_is_caught_and_the_message_fails(
    make_processor: ProcessorFactory, runtime_db: str, name: str, statement: str
) -> None:
    processor = make_processor(name, {LEDGER_ENTRY: _breaking(name, lambda c: c.execute(statement))})
    event = entry("order-1")
    with pytest.raises(TerminalFailure) as failure:
        processor.process(event)
    assert failure.value.reason == "handler_broke_transaction"
    # A COMMIT may have committed what came before it (the marker with it): the runtime cannot
    # undo that, so it fails the message (an operator sees it among the dead letters) rather
    # than count it applied. Either way a second delivery never applies it a second time.
    try:
        assert processor.process(event) is Outcome.DUPLICATE
    except TerminalFailure as again:
        assert again.reason == "handler_broke_transaction"
    assert ledger_rows(runtime_db, name, event.message_id) <= 1


def test_a_handler_may_use_a_savepoint_inside_the_transaction(
    make_processor: ProcessorFactory, runtime_db: str, name: str
) -> None:
    def handle(event: Envelope, connection: Connection) -> None:
        with connection.transaction():
            connection.execute(INSERT, (name, event.message_id, event.key))

    processor = make_processor(name, {LEDGER_ENTRY: handle})
    event = entry("order-1")
    assert processor.process(event) is Outcome.APPLIED
    assert processor.process(event) is Outcome.DUPLICATE
    assert ledger_rows(runtime_db, name, event.message_id) == 1


def test_a_broken_handler_in_a_batch_fails_only_its_own_message(
    make_processor: ProcessorFactory, runtime_db: str, name: str
) -> None:
    def handle(event: Envelope, connection: Connection) -> None:
        connection.execute(INSERT, (name, event.message_id, event.key))
        if event.payload.get("commit"):
            connection.commit()

    processor = make_processor(name, {LEDGER_ENTRY: handle})
    events = [entry("order-1"), entry("order-2", commit=True), entry("order-3")]
    results = processor.process_batch(events).results
    assert results[0] is Outcome.APPLIED and results[2] is Outcome.APPLIED
    assert isinstance(results[1], TerminalFailure) and results[1].reason == "handler_broke_transaction"
    assert [ledger_rows(runtime_db, name, e.message_id) for e in events] == [1, 0, 1]


class Line(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    sku: str = Field(min_length=1, max_length=64)
    quantity: int = Field(ge=1, le=1000)


class Placed(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)
    order_id: str = Field(min_length=1)
    lines: list[Line] = Field(min_length=1)


@pytest.fixture
def typed_consumer(make_processor: ProcessorFactory, name: str) -> tuple[MessageProcessor, list[Placed]]:
    seen: list[Placed] = []
    return _typed_processor(make_processor, name, seen), seen


def _typed_processor(make_processor: ProcessorFactory, name: str, seen: list[Placed]) -> MessageProcessor:
    def handle(event: Envelope, payload: Placed, connection: Connection) -> None:
        seen.append(payload)
        connection.execute(INSERT, (name, event.message_id, event.key))

    return make_processor(name, {"OrderPlaced": typed(Placed, handle)})


def test_a_typed_handler_receives_its_model(make_processor: ProcessorFactory, runtime_db: str, name: str) -> None:
    seen: list[Placed] = []
    processor = _typed_processor(make_processor, name, seen)
    event = Envelope.new("OrderPlaced", "o-1", {"order_id": "o-1", "lines": [{"sku": "sku-mug", "quantity": 2}]})
    assert processor.process(event) is Outcome.APPLIED
    assert seen == [Placed(order_id="o-1", lines=[Line(sku="sku-mug", quantity=2)])]


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"order_id": "o-1", "lines": [{"sku": "", "quantity": 2}]}, "lines.0.sku"),
        ({"order_id": "o-1", "lines": [{"sku": "sku-mug", "quantity": "2"}]}, "lines.0.quantity"),
        ({"order_id": "o-1", "lines": []}, "lines"),
        ({"lines": [{"sku": "sku-mug", "quantity": 1}]}, "order_id"),
        ({"order_id": "o-1", "lines": [{"sku": "sku-mug", "quantity": 1}], "admin": True}, "admin"),
    ],
)
def test_a_payload_that_does_not_fit_is_poison_with_the_field_named_and_claims_no_marker(
    make_processor: ProcessorFactory, runtime_db: str, name: str, payload: dict[str, object], field: str
) -> None:
    seen: list[Placed] = []
    processor = _typed_processor(make_processor, name, seen)
    event = Envelope.new("OrderPlaced", "o-1", payload)
    with pytest.raises(TerminalFailure) as failure:
        processor.process(event)
    assert failure.value.reason == "invalid_payload" and f"{field}:" in failure.value.error_text
    assert seen == [] and markers(runtime_db, name, event.message_id) == 0


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payload=st.dictionaries(st.sampled_from(["order_id", "lines", "extra"]), JSON, max_size=3))
def test_any_payload_is_either_handled_as_its_model_or_refused_before_a_transaction(
    typed_consumer: tuple[MessageProcessor, list[Placed]], runtime_db: str, payload: dict[str, object]
) -> None:
    processor, seen = typed_consumer
    seen.clear()
    event = Envelope.new("OrderPlaced", "o-1", payload)
    try:
        assert processor.process(event) is Outcome.APPLIED
        assert len(seen) == 1 and seen[0].model_dump() == payload
    except TerminalFailure as failure:
        assert failure.reason == "invalid_payload" and seen == []
        assert markers(runtime_db, processor.config.consumer_name, event.message_id) == 0


def test_a_processor_runs_only_the_paths_it_was_given(runtime_db: str, name: str) -> None:
    def connect() -> Connection:
        return psycopg.connect(runtime_db)

    with pytest.raises(ValueError, match="not installed"):
        MessageProcessor(ProcessorConfig(consumer_name=name, strategy=Strategy.NO_DEDUP), connect, {})
    production = MessageProcessor(ProcessorConfig(consumer_name=name), connect, {})
    with pytest.raises(ValueError, match="not installed"):
        path_for(Strategy.CHECK_THEN_ACT)  # the paths a production process is given: the correct one
    assert production.path.strategy is production.config.strategy is Strategy.CORRECT
