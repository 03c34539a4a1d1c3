"""A lab's rewind asked of a member that holds no partition yet (a process started again after a
crash, still joining): served once the member holds some, or answered empty after the grace."""

from __future__ import annotations

from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from effectively_once.lab import controls
from effectively_once.lab.controls import LabControls
from effectively_once.telemetry import NoTelemetry


class _Member:
    """The client side of a member: what it holds, where it stands, where it was sought."""

    def __init__(self) -> None:
        self.held: list[TopicPartition] = []
        self.sought: list[tuple[str, int, int]] = []

    def assignment(self) -> list[TopicPartition]:
        return list(self.held)

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        return [TopicPartition(tp.topic, tp.partition, 5) for tp in partitions]

    def seek(self, partition: TopicPartition) -> None:
        self.sought.append((partition.topic, partition.partition, partition.offset))


def test_a_rewind_waits_for_a_member_still_joining_and_is_served_once_it_holds_partitions() -> None:
    lab, member = LabControls("sales", NoTelemetry()), _Member()
    answer = lab.request_rewind(None)
    lab.between_polls(member)  # type: ignore[arg-type]
    assert not answer.done() and member.sought == []
    member.held = [TopicPartition("t", 0), TopicPartition("t", 2)]
    lab.between_polls(member)  # type: ignore[arg-type]
    assert answer.result(0) == [
        {"topic": "t", "partition": 0, "offset": "beginning"},
        {"topic": "t", "partition": 2, "offset": "beginning"},
    ]
    assert member.sought == [("t", 0, OFFSET_BEGINNING), ("t", 2, OFFSET_BEGINNING)]


def test_a_member_that_holds_nothing_after_the_grace_answers_it_has_no_partition(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lab, member = LabControls("sales", NoTelemetry()), _Member()
    now = [1000.0]
    monkeypatch.setattr("effectively_once.lab.controls.time.monotonic", lambda: now[0])
    answer = lab.request_rewind(None)
    lab.between_polls(member)  # type: ignore[arg-type]
    assert not answer.done()
    now[0] += controls.JOINING_GRACE_SECONDS
    lab.between_polls(member)  # type: ignore[arg-type]
    result: Any = answer.result(0)
    assert result == [] and member.sought == []
