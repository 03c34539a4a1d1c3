"""What becomes of each delivery, recorded three ways: counted (the outcome metrics), told
(telemetry, for the panel's timelines) and logged (ids, never the payload). The processor
records; nothing here decides anything.

A delivery that went as it should (applied, a duplicate, a type knowingly ignored) is logged at
DEBUG: the metrics and the telemetry already hold each one. At INFO, those lines cost about 4 ms
of an order's 40-45 ms of CPU, over every process and their supervisor: each line formatted as
JSON, written unbuffered, then copied to its file. Anything else is logged at WARNING."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Mapping
from typing import Any

from .. import metrics
from ..envelope import Envelope
from ..outcomes import Outcome, Strategy
from ..telemetry import Telemetry

log = logging.getLogger("effectively_once.consumer.processor")

AS_EXPECTED = frozenset((Outcome.APPLIED, Outcome.DUPLICATE, Outcome.IGNORED))
"""Outcomes logged at DEBUG; every other outcome is logged at WARNING."""


class Recorder:
    """One consumer's outcomes, under the strategy it runs now."""

    def __init__(self, consumer_name: str, strategy: Strategy, telemetry: Telemetry) -> None:
        self.consumer_name, self.strategy, self.telemetry = consumer_name, strategy, telemetry
        self.positions: Mapping[int, tuple[str, int, int]] = {}
        """Where each event of the poll being processed came from, by the event object's identity:
        (topic, partition, offset), told with its outcome. The consumer loop sets it each poll."""
        self._counters: dict[tuple[str, Outcome], Any] = {}
        self._told: list[dict[str, Any]] | None = None
        """Deliveries being recorded together, told as one telemetry record."""

    def switched(self, strategy: Strategy) -> None:
        """Count what follows under `strategy`."""
        self.strategy = strategy
        self._counters.clear()

    @contextlib.contextmanager
    def together(self) -> Iterator[None]:
        """Every outcome recorded inside, told to telemetry as one `deliveries` record."""
        self._told = []
        try:
            yield
        finally:
            told, self._told = self._told, None
            self.telemetry.emit("deliveries", items=told)

    def record(self, event: Envelope | None, outcome: Outcome, **fields: Any) -> None:
        """Count an outcome, tell it and log it (with ids, never the payload; a copy with other
        content names its differing fields, never their values): at DEBUG if AS_EXPECTED, else
        at WARNING."""
        event_type = event.type if event else "(undecodable)"
        counter = self._counters.get((event_type, outcome))
        if counter is None:
            counter = metrics.OUTCOMES.labels(self.consumer_name, event_type, outcome.value, self.strategy.value)
            self._counters[(event_type, outcome)] = counter
        counter.inc()
        kafka_key = fields.pop("kafka_key", None)
        position = self.positions.get(id(event)) if event is not None else None
        if position is not None:
            fields = {"topic": position[0], "partition": position[1], "offset": position[2], **fields}
        told = {
            "consumer": self.consumer_name,
            "strategy": self.strategy.value,
            "message_id": event.message_id if event else fields.get("message_id"),
            "key": event.key if event else kafka_key,
            "event_type": event_type,
            "outcome": outcome.value,
            **fields,
        }
        if self._told is not None:
            self._told.append(told)
        else:
            self.telemetry.emit("delivery", **told)
        level = logging.DEBUG if outcome in AS_EXPECTED else logging.WARNING
        if log.isEnabledFor(level):
            log.log(
                level,
                "%s %s",
                outcome.value,
                event_type,
                extra={
                    "consumer": self.consumer_name,
                    "strategy": self.strategy.value,
                    "message_id": event.message_id if event else None,
                    "event_type": event_type,
                    "trace_id": event.trace_id if event else None,
                    "outcome": outcome.value,
                    **fields,
                },
            )
