"""The panel's reading of Debezium's slots and connectors, against a stand-in for Kafka Connect's
REST API (the end-to-end test runs the real worker)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from chaos_panel.acting.control_endpoints import ControlError
from chaos_panel.reading.debezium_slots import CdcRelay
from services.connect_status import connector_state

SLOT_ROWS = [("eo_outbox_orders", "orders", True, 300_000, 1_000), ("eo_outbox_payment", "payment", True, 2_000, 0)]


def _connect(statuses: dict[str, dict[str, Any]], asked: list[str]) -> httpx.MockTransport:
    def answer(request: httpx.Request) -> httpx.Response:
        asked.append(f"{request.method} {request.url.path}")
        if request.method == "GET":
            return httpx.Response(200, json={name: {"status": status} for name, status in statuses.items()})
        return httpx.Response(202)

    return httpx.MockTransport(answer)


def _relay(statuses: dict[str, dict[str, Any]], asked: list[str]) -> CdcRelay:
    return CdcRelay(
        "http://connect:28083", lambda _database, _sql: list(SLOT_ROWS), transport=_connect(statuses, asked)
    )


def test_a_connector_whose_task_failed_shows_as_failed_though_kafka_connect_calls_it_running() -> None:
    statuses = {
        "outbox-orders": {"connector": {"state": "RUNNING"}, "tasks": [{"state": "FAILED", "trace": "boom"}]},
        "outbox-payment": {"connector": {"state": "RUNNING"}, "tasks": [{"state": "RUNNING"}]},
    }
    read = _relay(statuses, []).slots()
    slots = {slot["database"]: slot for slot in read["slots"]}
    assert slots["orders"]["connector"] == "FAILED"
    assert slots["payment"]["connector"] == "RUNNING"
    assert slots["orders"]["retained_bytes"] == 300_000 and read["error"] == ""


def test_pause_and_resume_go_to_the_named_connector_and_anything_else_is_refused() -> None:
    asked: list[str] = []
    relay = _relay({"outbox-orders": {"connector": {"state": "RUNNING"}, "tasks": []}}, asked)
    assert "paused outbox-orders" in relay.act("orders", "pause")
    assert "PUT /connectors/outbox-orders/pause" in asked
    with pytest.raises(ControlError, match="no connector for database") as unknown:
        relay.act("ledger", "pause")
    with pytest.raises(ControlError, match="action must be one of") as bad:
        relay.act("orders", "delete")
    assert unknown.value.status == bad.value.status == 400
    assert not [call for call in asked if "delete" in call or "ledger" in call]


def test_under_the_built_in_relay_there_is_nothing_to_show_or_pause() -> None:
    relay = CdcRelay("", lambda _database, _sql: [])
    assert (
        relay.slots() == {"slots": [], "error": relay.slots()["error"]} and "RELAY=debezium" in relay.slots()["error"]
    )
    with pytest.raises(ControlError) as refused:
        relay.act("orders", "pause")
    assert refused.value.status == 409


def test_the_panels_reset_resumes_only_the_paused_connectors() -> None:
    asked: list[str] = []
    paused = {"connector": {"state": "PAUSED"}, "tasks": [{"state": "PAUSED"}]}
    running = {"connector": {"state": "RUNNING"}, "tasks": [{"state": "RUNNING"}]}
    relay = _relay({"outbox-orders": paused, "outbox-payment": running}, asked)
    assert relay.resume_paused() == []
    assert [call for call in asked if call.startswith("PUT")] == ["PUT /connectors/outbox-orders/resume"]
    assert CdcRelay("", lambda _database, _sql: []).resume_paused() == []


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        ({"connector": {"state": "RUNNING"}, "tasks": [{"state": "RUNNING"}]}, ("RUNNING", "")),
        ({"connector": {"state": "PAUSED"}, "tasks": [{"state": "PAUSED"}]}, ("PAUSED", "")),
        ({"connector": {"state": "RUNNING"}, "tasks": []}, ("UNASSIGNED", "")),
        (
            {"connector": {"state": "RUNNING"}, "tasks": [{"state": "RUNNING"}, {"state": "UNASSIGNED"}]},
            ("UNASSIGNED", ""),
        ),
        (
            {"connector": {"state": "RUNNING"}, "tasks": [{"state": "FAILED", "trace": "x.SlotGone: eo\n\tat y"}]},
            ("FAILED", "x.SlotGone: eo"),
        ),
        ({"connector": {"state": "FAILED"}, "tasks": []}, ("FAILED", "no trace")),
    ],
)
def test_one_word_for_a_connector_whatever_mix_of_states_kafka_connect_reports(
    status: dict[str, Any], expected: tuple[str, str]
) -> None:
    assert connector_state(status) == expected
