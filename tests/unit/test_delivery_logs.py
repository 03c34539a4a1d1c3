"""What a delivery leaves in the log: a line per message only at DEBUG when it went as it should,
a warning otherwise; every outcome is counted and told all the same. HTTP clients' line per
request follows the same rule."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from effectively_once import logs
from effectively_once.consumer.recording import AS_EXPECTED, Recorder
from effectively_once.envelope import Envelope
from effectively_once.outcomes import Outcome, Strategy
from tests.support.fake_consumer import RecordedTelemetry

pytestmark = pytest.mark.unit


@pytest.fixture
def output() -> Iterator[io.StringIO]:
    """The root logger as a process configures it, writing JSON lines here; restored afterwards."""
    root = logging.getLogger()
    saved = root.handlers[:], root.level, {name: logging.getLogger(name).level for name in logs.PER_REQUEST_LOGGERS}
    written = io.StringIO()
    yield written
    root.handlers[:], root.level = saved[0], saved[1]
    for name, level in saved[2].items():
        logging.getLogger(name).setLevel(level)


def _configure(level: int, written: io.StringIO) -> None:
    logs.configure(level)
    handler = logging.getLogger().handlers[0]
    assert isinstance(handler, logging.StreamHandler)
    handler.setStream(written)


def _lines(written: io.StringIO) -> list[dict[str, Any]]:
    return [json.loads(line) for line in written.getvalue().splitlines()]


@given(outcome=st.sampled_from(Outcome))
def test_at_info_only_a_delivery_gone_wrong_is_logged_yet_every_one_is_counted_and_told(outcome: Outcome) -> None:
    written = io.StringIO()
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        _configure(logging.INFO, written)
        told = RecordedTelemetry()
        event = Envelope.new("Thing", "order-1", {"n": 1})
        Recorder("c-v1", Strategy.CORRECT, told).record(event, outcome)
    finally:
        root.handlers[:], root.level = saved
    lines = _lines(written)
    assert [fields["outcome"] for _, fields in told.records] == [outcome.value]
    if outcome in AS_EXPECTED:
        assert lines == []
    else:
        assert [(line["level"], line["outcome"], line["message_id"]) for line in lines] == [
            ("warning", outcome.value, event.message_id)
        ]


def test_the_expected_outcomes_are_those_of_a_delivery_that_went_as_it_should() -> None:
    assert {Outcome.APPLIED, Outcome.DUPLICATE, Outcome.IGNORED} == AS_EXPECTED


def test_at_debug_an_applied_delivery_is_logged_with_its_ids(output: io.StringIO) -> None:
    _configure(logging.DEBUG, output)
    event = Envelope.new("Thing", "order-1", {"secret": "card"})
    Recorder("c-v1", Strategy.CORRECT, RecordedTelemetry()).record(event, Outcome.APPLIED)
    (line,) = _lines(output)
    assert (line["level"], line["outcome"], line["message_id"], line["trace_id"]) == (
        "debug",
        "applied",
        event.message_id,
        event.trace_id,
    )
    assert "card" not in output.getvalue()


@pytest.mark.parametrize(("level", "shown"), [(logging.DEBUG, True), (logging.INFO, False), (logging.WARNING, False)])
def test_an_http_clients_line_per_request_shows_at_debug_only(output: io.StringIO, level: int, shown: bool) -> None:
    _configure(level, output)
    for name in logs.PER_REQUEST_LOGGERS:
        logging.getLogger(name).info("HTTP Request: POST http://127.0.0.1:9/charges")
        logging.getLogger(name).warning("a retry")
    messages = [line["message"] for line in _lines(output)]
    assert messages.count("a retry") == len(logs.PER_REQUEST_LOGGERS)
    assert (len(messages) > len(logs.PER_REQUEST_LOGGERS)) is shown
