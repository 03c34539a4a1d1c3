"""The requests this process's Kafka clients send, by kind, as a Prometheus counter: what a
benchmark divides by the orders it placed (`make bench`, benchmarks/order_counts.py).

Off unless `KAFKA_STATISTICS_INTERVAL_MS` is set: librdkafka then writes its statistics (a JSON
document per client) that often, and `record` adds what each broker's request counters grew by
since the client's previous document to `eo_kafka_requests_total{kind}` (Produce, Fetch,
OffsetCommit, Heartbeat, Metadata...). A client's counters start again at zero when it is made
anew; they are never read back, so a counter that went down is taken as a new start.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Mapping
from typing import Any

from prometheus_client import Counter
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

ENVIRONMENT_VARIABLE = "KAFKA_STATISTICS_INTERVAL_MS"

REQUESTS = Counter(
    "eo_kafka_requests",
    "Requests this process's Kafka clients sent, by kind (librdkafka's statistics, when "
    "KAFKA_STATISTICS_INTERVAL_MS is set)",
    ["kind"],
)

log = logging.getLogger(__name__)
_seen: dict[tuple[str, str, str], int] = {}
_lock = threading.Lock()


def record(statistics: str) -> None:
    """librdkafka's `stats_cb`: add each broker's request counts since the client's last document."""
    try:
        document = json.loads(statistics)
        client = str(document.get("name", ""))
        brokers = document.get("brokers") or {}
    except (ValueError, AttributeError) as error:
        log.warning("unreadable Kafka statistics: %s", error)
        return
    with _lock:
        for broker, state in brokers.items():
            for kind, count in (state.get("req") or {}).items():
                key = (client, broker, kind)
                previous = _seen.get(key, 0)
                grown = count - previous if count >= previous else count
                if grown:
                    REQUESTS.labels(kind).inc(grown)
                _seen[key] = count


class KafkaStatistics(BaseSettings):
    """How often a process's Kafka clients report their statistics (part of every process's
    settings, read where its clients are configured)."""

    model_config = SettingsConfigDict(extra="ignore")
    KAFKA_STATISTICS_INTERVAL_MS: int = Field(default=0, ge=0)


def statistics_config(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A client's statistics settings: none unless the environment (or `environ`, when given,
    alone) asks for an interval."""
    if environ is None:
        interval = KafkaStatistics().KAFKA_STATISTICS_INTERVAL_MS
    else:
        given = environ.get(ENVIRONMENT_VARIABLE, "").strip() or "0"
        interval = KafkaStatistics.model_validate({ENVIRONMENT_VARIABLE: given}).KAFKA_STATISTICS_INTERVAL_MS
    if not interval:
        return {}
    return {"statistics.interval.ms": interval, "stats_cb": record}


def with_counting(settings: Mapping[str, Any], counting: Mapping[str, Any]) -> dict[str, Any]:
    """A client's `settings` with the request counting `counting` asks for (statistics_config).
    A client that reads the statistics itself (its own `stats_cb`) keeps its callback: both are
    called, at the shorter of the two intervals."""
    if not counting:
        return dict(settings)
    own = settings.get("stats_cb")
    if own is None:
        return {**counting, **settings}

    def both(statistics: str) -> None:
        record(statistics)
        own(statistics)

    interval = min(counting["statistics.interval.ms"], settings.get("statistics.interval.ms") or 1 << 30)
    return {**settings, "statistics.interval.ms": interval, "stats_cb": both}
