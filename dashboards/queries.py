"""The PromQL both the Grafana dashboards and the chaos panel's own small charts draw."""

RATE_WINDOW = "1m"


def outcome_rate(outcomes: str) -> str:
    return f'rate(eo_consumer_messages_total{{outcome=~"{outcomes}"}}[{RATE_WINDOW}])'


DELIVERIES_BY_OUTCOME = f"sum by (outcome) ({outcome_rate('applied|duplicate|retryable_failure|terminal_failure')})"
DUPLICATE_RATIO = f"sum({outcome_rate('duplicate')}) / clamp_min(sum({outcome_rate('applied|duplicate')}), 1e-9)"
OUTBOX_BACKLOG = "sum by (database) (eo_outbox_backlog)"
CONSUMER_LAG = "sum by (consumer) (eo_consumer_lag_messages)"
DELIVERY_RATES = f"sum by (consumer, outcome) ({outcome_rate('applied|duplicate|retryable_failure|terminal_failure')})"
"""Per consumer and outcome: what the panel's system map writes on each consumer."""
LAG_BY_EDGE = "sum by (consumer, topic) (eo_consumer_lag_messages)"
"""Per consumer and topic: the lag the system map writes on each topic's arrow to a consumer."""
PUBLISHED_RATE = f"sum(rate(eo_outbox_published_total[{RATE_WINDOW}]))"
SLOT_RETAINED = "max by (database) (eo_replication_slot_retained_bytes)"
"""Under RELAY=debezium: the write-ahead log each outbox database's replication slot keeps."""


def _named(expr: str, series: str) -> str:
    return f'label_replace({expr}, "series", "{series}", "__name__", ".*")'


MARKER_AGE_AND_REDELIVERY = " or ".join(
    (
        _named("max(eo_marker_oldest_seconds)", "oldest marker"),
        _named("max(eo_consumer_oldest_unacknowledged_seconds)", "oldest unacknowledged"),
        _named("max(eo_oldest_dead_letter_seconds)", "oldest dead letter"),
    )
)
"""Marker age beside the ages of what could still come back: the oldest marker must stay older."""
