"""The runtime's Prometheus metrics: outcomes by consumer, event type and strategy, and timings."""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import Counter, Gauge, Histogram, disable_created_metrics

from .outcomes import Outcome

disable_created_metrics()  # type: ignore[no-untyped-call]  # no `_created` series beside every counter: dashboards do not use them

OUTCOMES = Counter(
    "eo_consumer_messages",
    "Deliveries handled, by what became of them.",
    ["consumer", "event_type", "outcome", "strategy"],
)
TRANSACTION_SECONDS = Histogram(
    "eo_consumer_transaction_seconds",
    "Time from BEGIN to COMMIT of one message's (or one batch's) transaction.",
    ["consumer"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)
CLAIM_WAIT_SECONDS = Histogram(
    "eo_consumer_claim_wait_seconds",
    "Time the marker INSERT took, including any wait on another transaction's claim.",
    ["consumer"],
    buckets=(0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5),
)
RETRIES = Counter("eo_consumer_retries", "Whole-transaction retries, by cause.", ["consumer", "cause"])
ROLLBACKS = Counter("eo_consumer_rollbacks", "Transactions rolled back.", ["consumer"])
DEAD_LETTERS = Counter("eo_consumer_dead_letters", "Messages sent to the dead-letter topic.", ["consumer", "reason"])
STRATEGY = Gauge(
    "eo_consumer_strategy_info",
    "1 for the strategy a consumer runs; anything but `correct` is a deliberate teaching mistake.",
    ["consumer", "strategy"],
)
LAG_MESSAGES = Gauge(
    "eo_consumer_lag_messages",
    "Messages on a partition past this consumer's position (librdkafka's consumer_lag, every 5 s).",
    ["consumer", "topic", "partition"],
)
PARTITION_STALLED = Gauge(
    "eo_consumer_partition_stalled",
    "1 while a partition this member holds has messages waiting and none consumed (stall_watch.py).",
    ["consumer", "topic", "partition"],
)
STALL_RECOVERIES = Counter(
    "eo_consumer_stall_recoveries",
    "What the member did about a stalled partition: seek (to its committed offset), rejoin (the group).",
    ["consumer", "how"],
)
SHARE_MEMBERS = Gauge(
    "eo_consumer_share_members",
    "Share-group members this process runs that are consuming now (CONSUMER_SHARE_GROUP).",
    ["consumer"],
)
SHARE_REDELIVERIES = Counter(
    "eo_consumer_share_redeliveries",
    "Records a share-group member received more than once (a released record, or a lock that expired).",
    ["consumer"],
)
SHARE_ACKNOWLEDGEMENTS_REFUSED = Counter(
    "eo_consumer_share_acknowledgements_refused",
    "Share-group acknowledgements the broker refused: a record whose lock had expired is another member's.",
    ["consumer"],
)
OLDEST_UNACKNOWLEDGED_SECONDS = Gauge(
    "eo_consumer_oldest_unacknowledged_seconds",
    "Age of the oldest message received but not yet acknowledged (0 when none).",
    ["consumer"],
)

DEDUP_HORIZON_SECONDS = Gauge(
    "eo_dedup_horizon_seconds", "The marker retention this consumer runs with (DEDUP_HORIZON_DAYS).", ["consumer"]
)
SAFE_HORIZON_SECONDS = Gauge(
    "eo_safe_horizon_seconds",
    "The shortest safe marker retention: the longest time a message can still come back (+Inf: no limit).",
    ["consumer"],
)
OLDEST_DEAD_LETTER_SECONDS = Gauge(
    "eo_oldest_dead_letter_seconds", "Age of the oldest message on this consumer's dead-letter topic.", ["consumer"]
)
MARKER_PURGE_REFUSED = Gauge(
    "eo_marker_purge_refused",
    "1 while the marker purge refuses to run: the retention is shorter than the safe horizon, or unknown.",
    ["consumer"],
)


RETRY_CAUSES = ("SerializationFailure", "DeadlockDetected", "handler_error", "batch_fallback")
DEAD_LETTER_REASONS = ("handler_failed", "transaction_retries_exhausted", "unknown_type", "undecodable", "oversized")
"""Created at zero with every consumer, so a panel of them never starts empty (others appear when they happen)."""


def precreate(consumer: str, strategy: str, event_types: Iterable[str]) -> None:
    """Create every outcome series at zero, so no dashboard panel starts empty."""
    STRATEGY.labels(consumer, strategy).set(1)
    for event_type in event_types:
        for outcome in Outcome:
            OUTCOMES.labels(consumer, event_type, outcome.value, strategy)
    TRANSACTION_SECONDS.labels(consumer)
    CLAIM_WAIT_SECONDS.labels(consumer)
    ROLLBACKS.labels(consumer)
    for cause in RETRY_CAUSES:
        RETRIES.labels(consumer, cause)
    for reason in DEAD_LETTER_REASONS:
        DEAD_LETTERS.labels(consumer, reason)
    OLDEST_UNACKNOWLEDGED_SECONDS.labels(consumer).set(0)
    for how in ("seek", "rejoin"):
        STALL_RECOVERIES.labels(consumer, how)
