"""A lab's rewind asked of a member that holds no partition yet (a process started again after a
crash, still joining): served once the member holds some, or answered empty after the grace."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, TopicPartition

from effectively_once.lab import controls
from effectively_once.lab.controls import LabControls, LabProcess
from effectively_once.telemetry import NoTelemetry
from tests.support.waiting import wait_for


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
    joining = [True]
    lab.joining = lambda: joining[0]
    answer = lab.request_rewind(None)
    lab.between_polls(member)  # type: ignore[arg-type]
    assert not answer.done() and member.sought == []
    member.held, joining[0] = [TopicPartition("t", 0), TopicPartition("t", 2)], False
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
    lab.joining = lambda: True
    now = [1000.0]
    monkeypatch.setattr("effectively_once.lab.controls.time.monotonic", lambda: now[0])
    answer = lab.request_rewind(None)
    lab.between_polls(member)  # type: ignore[arg-type]
    assert not answer.done()
    now[0] += controls.JOINING_GRACE_SECONDS
    lab.between_polls(member)  # type: ignore[arg-type]
    result: Any = answer.result(0)
    assert result == [] and member.sought == []


def test_a_member_that_joined_with_no_partition_answers_at_once() -> None:
    lab, member = LabControls("sales", NoTelemetry()), _Member()
    answer = lab.request_rewind(None)
    lab.between_polls(member)  # type: ignore[arg-type]
    assert answer.result(0) == []


def test_a_partition_sought_by_two_members_is_answered_once() -> None:
    """The first member rewinds the three partitions it holds; the second, still joining, is then
    handed one of them and seeks it too: the process answers each partition once."""
    first, second = _Member(), _Member()
    first.held = [TopicPartition("t", p) for p in range(3)]
    members = [(object(), LabControls("sales", NoTelemetry())), (object(), LabControls("sales", NoTelemetry()))]
    joining = [True]
    members[1][1].joining = lambda: joining[0]
    process = LabProcess("sales", members, "postgresql://unused", NoTelemetry())  # type: ignore[arg-type]
    done: list[Any] = []
    asking = threading.Thread(target=lambda: done.append(process.rewind(None)))
    asking.start()
    wait_for(lambda: members[0][1]._rewinds.qsize() == 1 and members[1][1]._rewinds.qsize() == 1, 5, "the asks")
    members[0][1].between_polls(first)  # type: ignore[arg-type]
    members[1][1].between_polls(second)  # type: ignore[arg-type]  # still joining: waits
    assert not done
    first.held, second.held, joining[0] = first.held[:2], [TopicPartition("t", 2)], False
    members[1][1].between_polls(second)  # type: ignore[arg-type]
    asking.join(5)
    assert sorted((p["topic"], p["partition"]) for p in done[0]) == [("t", 0), ("t", 1), ("t", 2)]
    assert ("t", 2, OFFSET_BEGINNING) in first.sought and ("t", 2, OFFSET_BEGINNING) in second.sought
