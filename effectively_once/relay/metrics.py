"""The relay's Prometheus metrics, by service database."""

from prometheus_client import Counter, Gauge, Histogram

BACKLOG = Gauge("eo_outbox_backlog", "Outbox rows not published yet.", ["database"])
OLDEST_UNPUBLISHED_SECONDS = Gauge(
    "eo_outbox_oldest_unpublished_seconds", "Age of the oldest unpublished outbox row.", ["database"]
)
PUBLISHED = Counter("eo_outbox_published", "Rows the broker confirmed and the relay marked.", ["database"])
FAILURES = Counter("eo_outbox_publish_failures", "Rows the broker did not confirm.", ["database"])
PUBLISH_LATENCY_SECONDS = Histogram(
    "eo_outbox_publish_latency_seconds",
    "From the outbox row's commit time (created_at) to the broker's confirmation.",
    ["database"],
    buckets=(0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
)
BATCH_SIZE = Histogram(
    "eo_outbox_batch_size",
    "Rows per relay transaction.",
    ["database"],
    buckets=(1, 5, 10, 50, 100, 250, 500, 1000, 2500),
)
PURGED = Counter("eo_outbox_purged", "Published rows purged after the retention horizon.", ["database"])
RETAINED_WAL_BYTES = Gauge(
    "eo_replication_slot_retained_bytes",
    "Write-ahead log a CDC relay's replication slot keeps the server from removing (RELAY=debezium).",
    ["database", "slot"],
)
