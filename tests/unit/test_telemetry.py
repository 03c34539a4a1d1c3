"""Telemetry records: valid JSON with the process's fields and the record's own, ids only."""

from __future__ import annotations

import json
from typing import Any

from effectively_once.telemetry import KafkaTelemetry, ids, report_faults


class _Producer:
    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, bytes | None]] = []
        self.flushed: list[float] = []

    def produce(self, topic: str, value: bytes, key: bytes | None) -> None:
        self.sent.append((topic, value, key))

    def poll(self, timeout: float) -> int:
        return 0

    def flush(self, timeout: float) -> int:
        self.flushed.append(timeout)
        return 0


def _telemetry() -> tuple[KafkaTelemetry, _Producer]:
    telemetry = KafkaTelemetry("127.0.0.1:9", "inventory", "inventory-0")
    producer = _Producer()
    telemetry._producer = producer  # type: ignore[assignment]
    return telemetry, producer


def test_a_record_carries_the_process_and_its_own_fields_keyed_by_order() -> None:
    telemetry, producer = _telemetry()
    telemetry.emit("delivery", consumer="c-v1", message_id="m-1", key="order-1", outcome="applied", reason=None)
    topic, value, key = producer.sent[0]
    record: dict[str, Any] = json.loads(value)
    assert topic == "platform.telemetry" and key == b"order-1"
    assert record["kind"] == "delivery" and record["process"] == "inventory" and record["instance"] == "inventory-0"
    assert record["message_id"] == "m-1" and "reason" not in record and isinstance(record["at"], float)


def test_a_record_without_fields_is_still_json() -> None:
    telemetry, producer = _telemetry()
    telemetry.emit("started")
    assert json.loads(producer.sent[0][1])["kind"] == "started" and producer.sent[0][2] is None


def test_a_crash_is_told_and_flushed_before_the_process_goes() -> None:
    telemetry, producer = _telemetry()
    report_faults(telemetry)("after_commit_before_ack", "crash", {"keys": ["order-1"]})
    report_faults(telemetry)("before_commit", "raise", {})
    assert [json.loads(v)["action"] for _, v, _ in producer.sent] == ["crash", "raise"]
    assert producer.flushed == [2.0]


def test_ids_are_distinct_and_bounded() -> None:
    assert ids(["a", "b", "a"]) == ["a", "b"]
    assert len(ids([str(n) for n in range(500)])) == 50
