"""The platform's Grafana dashboards, built with grafana-foundation-sdk.

Every panel reads series the platform's processes export (pre-created at zero where they are
counters, so no panel starts empty). `make dashboards` writes them to generated/, which compose
provisions into Grafana; a test fails when the committed JSON is stale, and another runs every
expression against a live Prometheus.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from grafana_foundation_sdk.builders.dashboard import AnnotationQuery, Dashboard, Row
from grafana_foundation_sdk.builders.prometheus import Dataquery
from grafana_foundation_sdk.builders.stat import Panel as Stat
from grafana_foundation_sdk.builders.timeseries import Panel as Timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.dashboard import DataSourceRef

from dashboards.queries import (
    CONSUMER_LAG,
    DUPLICATE_RATIO,
    MARKER_AGE_AND_REDELIVERY,
    OUTBOX_BACKLOG,
    RATE_WINDOW,
    SLOT_RETAINED,
)
from dashboards.queries import outcome_rate as _outcome_rate

PROMETHEUS = DataSourceRef(type_val="prometheus", uid="prometheus")
"""The datasource infra/grafana/provisioning/datasources/prometheus.yml provisions."""


def query(expr: str, legend: str = "") -> Dataquery:
    built = Dataquery().expr(expr).datasource(PROMETHEUS)
    return built.legend_format(legend) if legend else built


def series(title: str, unit: str, *queries: Dataquery, description: str = "", width: int = 12) -> Timeseries:
    panel = Timeseries().title(title).unit(unit).datasource(PROMETHEUS).height(8).span(width)
    if description:
        panel = panel.description(description)
    for target in queries:
        panel = panel.with_target(target)
    return panel


def stat(title: str, unit: str, target: Dataquery, description: str = "", width: int = 6) -> Stat:
    panel = Stat().title(title).unit(unit).datasource(PROMETHEUS).height(4).span(width).with_target(target)
    return panel.description(description) if description else panel


def _dashboard(uid: str, title: str, description: str) -> Dashboard:
    return (
        Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(["effectively-once"])
        .refresh("5s")
        .time("now-15m", "now")
        .timezone("browser")
    )


def overview() -> Dashboard:
    outcomes = f"rate(eo_consumer_messages_total[{RATE_WINDOW}])"
    return (
        _dashboard("eo-overview", "effectively-once: overview", "What every consumer did, and where the sagas are.")
        .with_row(Row("Outcomes"))
        .with_panel(
            series(
                "Deliveries by outcome",
                "ops",
                query(f"sum by (outcome) ({outcomes})", "{{outcome}}"),
                description="Every delivery to every consumer: applied, duplicate, retryable, terminal, ignored.",
            )
        )
        .with_panel(
            series(
                "Duplicate ratio",
                "percentunit",
                query(DUPLICATE_RATIO, "duplicates / (applied + duplicates)"),
                description="Redeliveries the markers absorbed. Duplicates are expected; doubled effects must be zero.",
            )
        )
        .with_panel(
            series(
                "Failures by consumer",
                "ops",
                query(
                    f"sum by (consumer, outcome) ({_outcome_rate('retryable_failure|terminal_failure')})",
                    "{{consumer}} {{outcome}}",
                ),
            )
        )
        .with_panel(
            series(
                "Strategy per consumer",
                "none",
                query("eo_consumer_strategy_info == 1", "{{consumer}}: {{strategy}}"),
                description="1 for the strategy each consumer runs; anything but `correct` is a teaching mistake.",
            )
        )
        .with_row(Row("Saga"))
        .with_panel(
            series(
                "Saga throughput",
                "ops",
                query(f'sum(rate(eo_orders_placed_total{{outcome="placed"}}[{RATE_WINDOW}]))', "orders placed"),
                query(
                    f'sum(rate(eo_consumer_messages_total{{consumer="orders-saga-v1",event_type="NotificationSent",'
                    f'outcome="applied"}}[{RATE_WINDOW}]))',
                    "orders confirmed",
                ),
            )
        )
        .with_panel(series("Orders by saga state", "short", query("eo_saga_orders", "{{status}}")))
    )


def consumers() -> Dashboard:
    def quantile(q: float, histogram: str) -> str:
        return f"histogram_quantile({q}, sum by (consumer, le) (rate({histogram}_bucket[{RATE_WINDOW}])))"

    return (
        _dashboard("eo-consumers", "effectively-once: consumers", "Each consumer's transactions, retries and lag.")
        .with_row(Row("Transactions"))
        .with_panel(
            series(
                "Transaction latency",
                "s",
                query(quantile(0.5, "eo_consumer_transaction_seconds"), "{{consumer}} p50"),
                query(quantile(0.99, "eo_consumer_transaction_seconds"), "{{consumer}} p99"),
                description="BEGIN to COMMIT of one message's (or one batch's) transaction.",
            )
        )
        .with_panel(
            series(
                "Claim wait (p99)",
                "s",
                query(quantile(0.99, "eo_consumer_claim_wait_seconds"), "{{consumer}}"),
                description="The marker INSERT, including any wait on another transaction's uncommitted claim.",
            )
        )
        .with_panel(
            series(
                "Retries by cause",
                "ops",
                query(
                    f"sum by (consumer, cause) (rate(eo_consumer_retries_total[{RATE_WINDOW}]))",
                    "{{consumer}} {{cause}}",
                ),
            )
        )
        .with_panel(
            series(
                "Rollbacks and dead letters",
                "ops",
                query(
                    f"sum by (consumer) (rate(eo_consumer_rollbacks_total[{RATE_WINDOW}]))", "{{consumer}} rollbacks"
                ),
                query(
                    f"sum by (consumer) (rate(eo_consumer_dead_letters_total[{RATE_WINDOW}]))",
                    "{{consumer}} dead letters",
                ),
            )
        )
        .with_row(Row("Backlog"))
        .with_panel(series("Consumer lag", "short", query(CONSUMER_LAG, "{{consumer}}")))
        .with_panel(
            series(
                "Oldest unacknowledged message",
                "s",
                query("max by (consumer) (eo_consumer_oldest_unacknowledged_seconds)", "{{consumer}}"),
            )
        )
        .with_row(Row("Markers"))
        .with_panel(series("Marker rows", "short", query("eo_marker_rows", "{{consumer}}")))
        .with_panel(
            series("Marker table size", "bytes", query("max by (consumer) (eo_marker_table_bytes)", "{{consumer}}"))
        )
        .with_panel(
            series(
                "Marker age and what could come back",
                "s",
                query(MARKER_AGE_AND_REDELIVERY, "{{series}}"),
                description="The oldest marker must stay older than the oldest unacknowledged message and "
                "the oldest dead letter: those can still be delivered again, and need their markers.",
            )
        )
        .with_panel(
            series(
                "Retention against the safe horizon",
                "s",
                query("min by (consumer) (eo_dedup_horizon_seconds)", "{{consumer}} retention"),
                query("max by (consumer) (eo_safe_horizon_seconds)", "{{consumer}} shortest safe"),
                description="Each consumer's purge refuses to run while its retention is under the shortest safe one.",
            )
        )
    )


SLOT_PANEL = "Log kept by each replication slot"
DEBEZIUM_ONLY = (SLOT_PANEL,)
"""Panels that have data only under RELAY=debezium (the built-in relay has no replication slot)."""


def relay() -> Dashboard:
    latency = f"sum by (le) (rate(eo_outbox_publish_latency_seconds_bucket[{RATE_WINDOW}]))"
    return (
        _dashboard("eo-relay", "effectively-once: outbox relay", "The outboxes' backlog and the relay's publishing.")
        .with_panel(series("Backlog", "short", query(OUTBOX_BACKLOG, "{{database}}")))
        .with_panel(
            series(
                "Oldest unpublished row",
                "s",
                query("max by (database) (eo_outbox_oldest_unpublished_seconds)", "{{database}}"),
            )
        )
        .with_panel(
            series(
                "Publish latency",
                "s",
                query(f"histogram_quantile(0.5, {latency})", "p50"),
                query(f"histogram_quantile(0.99, {latency})", "p99"),
                description="From the row's commit to the broker's confirmation.",
            )
        )
        .with_panel(
            series(
                "Published and failed",
                "ops",
                query(f"sum by (database) (rate(eo_outbox_published_total[{RATE_WINDOW}]))", "{{database}} published"),
                query(
                    f"sum by (database) (rate(eo_outbox_publish_failures_total[{RATE_WINDOW}]))", "{{database}} failed"
                ),
            )
        )
        .with_panel(
            series(
                SLOT_PANEL,
                "bytes",
                query(SLOT_RETAINED, "{{database}}"),
                description="Under RELAY=debezium: a stopped or paused connector makes its slot keep every byte "
                "of write-ahead log after its confirmed position (alert ReplicationSlotRetainsWal above 256 MB).",
            )
        )
    )


def chaos() -> Dashboard:
    restarts = "changes(process_start_time_seconds[1m]) > 0"
    return (
        _dashboard("eo-chaos", "effectively-once: chaos", "Injected faults, restarts, and the outside world's replays.")
        .annotation(
            AnnotationQuery()
            .name("Process restarts")
            .datasource(PROMETHEUS)
            .enable(True)
            .icon_color("red")
            .expr(restarts)
        )
        .with_panel(
            series(
                "Faults fired",
                "short",
                query("sum by (process, point) (increase(eo_faults_fired_total[5m]))", "{{process}} {{point}}"),
                description="Raised, stalled or serialization faults; a crash shows as a restart instead.",
            )
        )
        .with_panel(
            series(
                "Process restarts (last 15 minutes)",
                "short",
                query("changes(process_start_time_seconds[15m])", "{{process}}"),
            )
        )
        .with_panel(
            series(
                "Payment provider",
                "ops",
                query(f"sum by (result) (rate(eo_provider_requests_total[{RATE_WINDOW}]))", "{{result}}"),
                description="`replayed`: an idempotent replay, the same key answered from its stored response.",
            )
        )
        .with_panel(
            series(
                "Mail sandbox",
                "ops",
                query(f"sum by (result) (rate(eo_mail_requests_total[{RATE_WINDOW}]))", "{{result}}"),
            )
        )
        .with_panel(
            stat(
                "Idempotent replays at the provider",
                "short",
                query('sum(eo_provider_requests_total{result="replayed"})'),
                width=12,
            )
        )
    )


DASHBOARDS = {"overview": overview, "consumers": consumers, "relay": relay, "chaos": chaos}


def render(name: str) -> str:
    """One dashboard as the JSON Grafana provisions (stable: sorted keys, a final newline).

    Panels are numbered 1, 2, … and each panel's queries A, B, …: Grafana needs both unique."""
    document: dict[str, Any] = json.loads(JSONEncoder(sort_keys=True).encode(DASHBOARDS[name]().build()))
    for number, panel in enumerate(document.get("panels", []), start=1):
        panel["id"] = number
        for index, target in enumerate(panel.get("targets", [])):
            target["refId"] = chr(ord("A") + index)
    document.setdefault("annotations", {}).setdefault("list", [])
    return json.dumps(document, indent=2, sort_keys=True) + "\n"


def expressions(dashboard_json: dict[str, Any]) -> Iterator[tuple[str, str]]:
    """(panel title, PromQL) for every target of every panel."""
    for panel in dashboard_json.get("panels", []):
        for target in panel.get("targets", []):
            if target.get("expr"):
                yield panel.get("title", "?"), target["expr"]
