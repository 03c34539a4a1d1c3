"""A message is its id: the marker's key is (consumer, message id) and nothing else a copy carries.

The time that places a marker in its day is read from the id, the same way in Python and in the
database; the dedup horizon counts from it too, so no copy moves a message's age; and the contract
suite's copy property fails a consumer whose marker key holds occurred_at (the teaching strategy
that puts the old bug back).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from effectively_once import contract, lab
from effectively_once.consumer.processor import MessageProcessor, ProcessorConfig, TerminalFailure, path_for
from effectively_once.contract import scenarios
from effectively_once.envelope import Envelope
from effectively_once.message_ids import LATEST, message_id_time, new_message_id
from effectively_once.outcomes import Outcome, Strategy
from tests.integration.conftest import ProcessorFactory
from tests.integration.test_contract_suite import _placed, _units_reserved
from workbench.ledger import LEDGER_ENTRY, ledger_handler, ledger_rows, markers

ANY_TEXT = st.text(max_size=60).filter(lambda text: "\x00" not in text)
TIMED_IDS = st.integers(0, 2**48 - 1).map(lambda ms: new_message_id(ms * 1_000_000))


@pytest.fixture(scope="module")
def database(runtime_db: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(runtime_db, autocommit=True) as connection:
        yield connection


@settings(max_examples=300, deadline=None)
@given(message_id=ANY_TEXT | TIMED_IDS | TIMED_IDS.map(str.upper) | TIMED_IDS.map(lambda i: i + "\n"))
def test_python_reads_the_time_an_id_carries_exactly_as_the_database_does(
    database: psycopg.Connection[Any], message_id: str
) -> None:
    in_python = message_id_time(message_id)
    row = database.execute(
        "SELECT message_id_time(%s)::text, message_id_time(%s) = %s", (message_id, message_id, in_python)
    ).fetchone()
    assert row is not None
    if in_python is None:
        assert row[0] == "-infinity", f"the database reads {row[0]} from {message_id!r}; Python reads no time"
    elif in_python == LATEST:  # past the year 9999: later than any time Python holds
        assert database.execute("SELECT message_id_time(%s) > %s", (message_id, LATEST)).fetchone() == (True,)
    else:
        assert row[1], f"the database reads {row[0]} from {message_id!r}; Python reads {in_python}"


def test_a_minted_id_carries_the_time_it_was_minted() -> None:
    before = datetime.now(UTC) - timedelta(milliseconds=1)
    ids = {new_message_id() for _ in range(1000)}
    minted = {message_id_time(message_id) for message_id in ids}
    assert len(ids) == 1000
    assert all(t is not None and before <= t <= datetime.now(UTC) for t in minted)
    at = datetime(2026, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    event = Envelope.new("Test", "k", {}, at=at)
    assert message_id_time(event.message_id) == at and event.occurred_at == at


def test_the_horizon_counts_from_the_time_the_id_carries_never_from_what_a_copy_says(
    make_processor: ProcessorFactory, runtime_db: str, name: str
) -> None:
    processor = make_processor(name, {LEDGER_ENTRY: ledger_handler(name)}, dedup_horizon=timedelta(days=7))
    eight_days_ago = datetime.now(UTC) - timedelta(days=8)
    minted_long_ago = Envelope.new(LEDGER_ENTRY, "order-1", {}, at=eight_days_ago)
    with pytest.raises(TerminalFailure) as refused:
        processor.process(replace(minted_long_ago, occurred_at=datetime.now(UTC)))
    assert refused.value.reason == "beyond_dedup_horizon" and "minted" in str(refused.value)
    fresh = Envelope.new(LEDGER_ENTRY, "order-2", {})
    claims_to_be_old = replace(fresh, occurred_at=eight_days_ago)
    assert processor.process(claims_to_be_old) is Outcome.APPLIED, "its id is fresh: its marker is kept"
    assert ledger_rows(runtime_db, name, fresh.message_id) == 1


def test_a_copy_of_an_applied_message_that_its_handler_would_refuse_is_still_a_duplicate(
    make_processor: ProcessorFactory, runtime_db: str, name: str
) -> None:
    """Identity comes first: a copy whose type no handler knows, or that is older than the horizon,
    is refused only if its id was never applied; applied, it is a duplicate with different content."""
    processor = make_processor(name, {LEDGER_ENTRY: ledger_handler(name)}, dedup_horizon=timedelta(days=7))
    event = Envelope.new(LEDGER_ENTRY, "order-1", {})
    assert processor.process(event) is Outcome.APPLIED
    renamed = replace(event, type="NoSuchEvent")
    assert processor.process(renamed) is Outcome.DUPLICATE_WITH_DIFFERENT_CONTENT
    with pytest.raises(TerminalFailure, match="unknown_type"):
        processor.process(replace(renamed, message_id=new_message_id()))
    assert (ledger_rows(runtime_db, name, event.message_id), markers(runtime_db, name, event.message_id)) == (1, 1)


def test_a_foreign_producers_untimed_id_is_deduplicated_like_any_other(
    make_processor: ProcessorFactory, runtime_db: str, name: str
) -> None:
    processor = make_processor(name, {LEDGER_ENTRY: ledger_handler(name)})
    event = Envelope(message_id=f"foreign-{name}", type=LEDGER_ENTRY, key="order-1", payload={})
    later = replace(event, occurred_at=event.occurred_at + timedelta(days=1))
    assert [processor.process(event), processor.process(later)] == [
        Outcome.APPLIED,
        Outcome.DUPLICATE_WITH_DIFFERENT_CONTENT,
    ]
    assert ledger_rows(runtime_db, name, event.message_id) == 1


def _mistaken_processor(
    subject: contract.Subject,
    name: str,
    handlers: Any,
    faults: Any = None,
    isolation_level: str = "READ COMMITTED",
    telemetry: Any = None,
) -> MessageProcessor:
    """The contract suite's processor, running the teaching strategy that keys the marker by occurred_at."""
    return MessageProcessor(
        ProcessorConfig(consumer_name=name, strategy=Strategy.OCCURRED_AT_IN_KEY, backoff_base_seconds=0.001),
        connect=subject.connect,
        handlers=handlers,
        telemetry=telemetry,
        path=path_for(Strategy.OCCURRED_AT_IN_KEY, lab.PATHS),
    )


def test_the_copy_property_fails_a_consumer_whose_marker_key_holds_occurred_at(
    runtime_db: str, monkeypatch: pytest.MonkeyPatch, settings: Any
) -> None:
    from tests.integration.conftest import service_schema

    subject = contract.Subject(
        database_url=service_schema(runtime_db, "inventory"),
        bootstrap_servers=settings.kafka_bootstrap_servers,
        handlers="services.inventory.handlers:HANDLERS",
        make_event=_placed,
        effects=_units_reserved,
    )
    [scenario] = [s for s in contract.SCENARIOS if s.name == "copy-with-other-content"]
    monkeypatch.setattr(scenarios, "_processor", _mistaken_processor)
    monkeypatch.setattr(scenarios, "COPIED_FIELDS", ("occurred_at",))
    with pytest.raises(contract.ContractViolation, match=r"changing \['occurred_at'\], \w[\w ]*, gave applied"):
        scenario.run(subject)
