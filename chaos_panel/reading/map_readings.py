"""What the system map shows, read at one moment: each process from its control endpoint, the
restarts from the telemetry, the rates, lags and outbox backlogs from Prometheus (when the panel
has one), the parked work from the executors, and the auditor's last verdict."""

from __future__ import annotations

import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from chaos_panel.acting.control_endpoints import ProcessState
from chaos_panel.context import Panel
from chaos_panel.drawing.system_map import ProcessReading, Readings
from dashboards.queries import DELIVERY_RATES, LAG_BY_EDGE, OUTBOX_BACKLOG, PUBLISHED_RATE

FAILED = ("retryable_failure", "terminal_failure")


def _process(state: ProcessState, restarts: int, now: float) -> ProcessReading:
    return ProcessReading(
        up=state.up,
        restarts=restarts,
        uptime_seconds=None if state.started_at is None else max(0.0, now - state.started_at),
        strategy=state.strategy,
        armed=tuple(f"{arming['action']} @ {point}" for point, arming in state.armed.items()),
        totals=dict(state.outcomes),
        stalled=tuple(state.stalled),
    )


def instant(prometheus_url: str, expr: str) -> list[tuple[dict[str, str], float]]:
    """An instant query's series as (labels, value); none when Prometheus does not answer."""
    try:
        answer = httpx.get(f"{prometheus_url}/api/v1/query", params={"query": expr}, timeout=1.5).json()
        result = answer["data"]["result"] if answer.get("status") == "success" else []
        return [(dict(item["metric"]), float(item["value"][1])) for item in result]
    except (httpx.HTTPError, ValueError, KeyError, TypeError):
        return []


def _from_prometheus(url: str) -> dict[str, Any]:
    """The four queries at once: a Prometheus that hangs delays the map by one timeout, not four."""
    with ThreadPoolExecutor(max_workers=4) as pool:
        delivered, lag, backlog, published = pool.map(
            lambda expr: instant(url, expr), (DELIVERY_RATES, LAG_BY_EDGE, OUTBOX_BACKLOG, PUBLISHED_RATE)
        )
    rates: dict[tuple[str, str], float] = defaultdict(float)
    for labels, value in delivered:
        outcome = "failed" if labels.get("outcome") in FAILED else labels.get("outcome", "")
        rates[(labels.get("consumer", ""), outcome)] += value
    return {
        "rates": dict(rates),
        "lag": {(labels.get("consumer", ""), labels.get("topic", "")): value for labels, value in lag},
        "backlog": {labels.get("database", ""): value for labels, value in backlog},
        "published_per_second": published[0][1] if published else None,
    }


def read(panel: Panel) -> Readings:
    now = time.time()
    restarts = panel.store.restarts()
    processes = {
        state.name: _process(state, restarts.get(state.name, 0), now)
        for state in [*panel.control.states(), *panel.control.http_states()]
    }
    parked_rows, _ = panel.control.parked()
    parked: dict[str, int] = defaultdict(int)
    for row in parked_rows:
        parked[str(row["process"])] += 1
    try:
        verdict = panel.recent_verdict()
        verdict_word, anomalies = ("green" if verdict.green else "red"), len(verdict.anomalies)
    except Exception:  # a database away or not configured: the map still draws, its verdict unknown
        verdict_word, anomalies = "unknown", 0
    figures = _from_prometheus(panel.settings.PROMETHEUS_URL) if panel.settings.PROMETHEUS_URL else {}
    pair = panel.databases.nodes() if panel.databases.available else {}
    return Readings(
        processes=processes,
        parked=dict(parked),
        verdict=verdict_word,
        anomalies=anomalies,
        relay=panel.cdc.relay,
        postgres=list(pair.get("nodes", [])),
        synchronous=pair.get("synchronous"),
        **figures,
    )
