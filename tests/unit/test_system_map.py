"""The front page's system map: drawn where the architecture puts each part, an arrow for each
topic a consumer reads, and whatever the figures, nothing drawn outside its box or on another."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from chaos_panel.drawing.system_map import (
    CONSUMER_PROCESS,
    LINE_CHAR,
    LINE_STEP,
    LINE_TOP,
    PADDING,
    Box,
    ProcessReading,
    Readings,
    SystemMap,
    as_text,
    build,
)
from services.topology import CONSUMERS, EVENT_TOPICS

PROCESSES = (
    *CONSUMER_PROCESS.values(),
    "outbox-relay",
    "payment-executor",
    "notification-dispatcher",
    "orders-api",
    "payment-provider",
    "mail",
)


def _overlap(a: Box, b: Box) -> bool:
    return a.x < b.x + b.w and b.x < a.x + a.w and a.y < b.y + b.h and b.y < a.y + a.h


def _box(drawn: SystemMap, box_id: str) -> Box:
    return next(box for box in drawn.boxes if box.id == box_id)


def test_every_part_is_drawn_once_and_no_box_lies_on_another() -> None:
    drawn = build(Readings(processes={name: ProcessReading(up=True) for name in PROCESSES}))
    ids = [box.id for box in drawn.boxes]
    assert len(ids) == len(set(ids))
    assert {f"topic-{topic}" for topic in EVENT_TOPICS} <= set(ids)
    assert {f"consumer-{process}" for process in CONSUMER_PROCESS.values()} <= set(ids)
    for n, box in enumerate(drawn.boxes):
        assert box.x >= 0 and box.y >= 0 and box.x + box.w <= drawn.width and box.y + box.h <= drawn.height, box.id
        for other in drawn.boxes[n + 1 :]:
            assert not _overlap(box, other), (box.id, other.id)


def test_each_consumer_has_an_arrow_from_each_topic_it_reads_carrying_its_lag() -> None:
    lag = {(consumer.name, topic): 7.0 for consumer in CONSUMERS for topic in consumer.topics}
    drawn = build(Readings(processes={}, lag=lag))
    for consumer in CONSUMERS:
        box = _box(drawn, f"consumer-{CONSUMER_PROCESS[consumer.name]}")
        into = [
            arrow
            for arrow in drawn.arrows
            if arrow.points[-1][0] == box.x and box.y <= arrow.points[-1][1] <= box.y + box.h
        ]
        starts = {arrow.points[0] for arrow in into}
        assert starts == {_box(drawn, f"topic-{topic}").right for topic in consumer.topics}, consumer.name
        assert all(arrow.label == "lag 7" for arrow in into)


def test_a_process_down_just_back_or_teaching_says_so_in_words_not_only_colour() -> None:
    readings = Readings(
        processes={
            "inventory": ProcessReading(up=False, restarts=1),
            "payment": ProcessReading(up=True, restarts=2, uptime_seconds=3),
            "orders-saga": ProcessReading(up=True, strategy="check_then_act"),
            "notification": ProcessReading(up=True, armed=("crash @ after_commit_before_ack",)),
        },
        rates={("inventory-reservation-v1", "duplicate"): 2.5},
        verdict="red",
        anomalies=2,
    )
    drawn = build(readings)
    states = {box.id: box.state for box in drawn.boxes}
    assert states["consumer-inventory"] == "down" and states["consumer-payment"] == "back"
    assert states["consumer-orders-saga"] == "teaching" and states["consumer-sales-projection"] == "down"
    words = "\n".join(as_text(drawn))
    assert "DOWN: being restarted" in words
    assert "back 3 s ago (restart 2)" in words
    assert "strategy: check_then_act" in words
    assert "⚡ crash @ after_commit_bef" in words
    assert "Auditor (down): red: 2 anomalies" in words


def test_a_consumer_with_a_stalled_partition_or_a_copy_with_other_content_says_which() -> None:
    reading = ProcessReading(
        up=True, totals={"applied": 5, "duplicate_with_different_content": 2}, stalled=("inventory.events/2",)
    )
    words = "\n".join(as_text(build(Readings(processes={"payment": reading}))))
    assert "⚠ stalled: inventory.events/2" in words
    assert "⚠ 2 dup with other content" in words


reading = st.builds(
    ProcessReading,
    up=st.booleans(),
    restarts=st.integers(0, 10**6),
    uptime_seconds=st.none() | st.floats(0, 10**7),
    strategy=st.sampled_from([None, "correct", "check_then_act", "marker_before_in_separate_txn"]),
    armed=st.lists(st.text(min_size=1, max_size=80), max_size=4).map(tuple),
    totals=st.dictionaries(
        st.sampled_from(["applied", "duplicate", "duplicate_with_different_content", "retryable_failure"]),
        st.floats(0, 10**12),
    ),
    stalled=st.lists(st.sampled_from([f"{t}/{n}" for t in EVENT_TOPICS for n in range(3)]), max_size=3).map(tuple),
)
consumers = st.sampled_from([consumer.name for consumer in CONSUMERS])
figure = st.floats(0, 10**9)


@given(
    processes=st.dictionaries(st.sampled_from(PROCESSES), reading),
    rates=st.dictionaries(st.tuples(consumers, st.sampled_from(["applied", "duplicate", "failed"])), figure),
    lag=st.dictionaries(st.tuples(consumers, st.sampled_from(EVENT_TOPICS)), figure),
    backlog=st.dictionaries(st.sampled_from(["orders", "inventory", "payment", "notification"]), figure),
    parked=st.dictionaries(st.sampled_from(["payment-executor", "notification-dispatcher"]), st.integers(0, 10**7)),
    verdict=st.sampled_from(["green", "red", "unknown"]),
    anomalies=st.integers(0, 10**6),
    relay=st.sampled_from(["builtin", "debezium"]),
)
def test_whatever_the_figures_every_text_stays_inside_its_box(
    processes: dict[str, ProcessReading],
    rates: dict[tuple[str, str], float],
    lag: dict[tuple[str, str], float],
    backlog: dict[str, float],
    parked: dict[str, int],
    verdict: str,
    anomalies: int,
    relay: str,
) -> None:
    drawn = build(Readings(processes, rates, lag, backlog, None, parked, verdict, anomalies, relay))
    for box in drawn.boxes:
        inner = box.w - 2 * PADDING
        assert len(box.title) * box.title_char + box.mark_room <= inner, box.title
        assert LINE_TOP + (len(box.lines) - 1) * LINE_STEP <= box.h - 6, (box.id, [line.text for line in box.lines])
        for line in box.lines:
            assert len(line.text) * LINE_CHAR <= inner, line.text
        if box.state == "down" and box.process:
            assert any("DOWN" in line.text or "not heard" in line.text for line in box.lines), box.id
