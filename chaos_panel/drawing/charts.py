"""The panel's own small live charts, drawn as SVG from Prometheus range queries: the same series
the Grafana dashboards show (dashboards/queries.py), for the native path, which has no Grafana."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import httpx

from dashboards.queries import (
    CONSUMER_LAG,
    DELIVERIES_BY_OUTCOME,
    DUPLICATE_RATIO,
    MARKER_AGE_AND_REDELIVERY,
    OUTBOX_BACKLOG,
    SLOT_RETAINED,
)

WIDTH, HEIGHT = 320.0, 90.0
BYTES = "bytes"
"""A chart's unit when its values are sizes: shown as B, kB, MB or GB."""
COLOURS = ("#2e9d52", "#1e88e5", "#f57c00", "#c62828", "#6d4c9f", "#00897b", "#8d6e63")


@dataclass(frozen=True)
class ChartSpec:
    title: str
    expr: str
    label: str
    unit: str = ""


CHARTS = (
    ChartSpec("Deliveries per second, by outcome", DELIVERIES_BY_OUTCOME, "outcome", "/s"),
    ChartSpec("Duplicate ratio", DUPLICATE_RATIO, "", ""),
    ChartSpec("Outbox backlog", OUTBOX_BACKLOG, "database", " rows"),
    ChartSpec("Consumer lag", CONSUMER_LAG, "consumer", " msgs"),
    ChartSpec("Marker age and what could come back", MARKER_AGE_AND_REDELIVERY, "series", " s"),
)
SLOT_CHARTS = (ChartSpec("Log kept by each replication slot", SLOT_RETAINED, "database", BYTES),)
"""Under RELAY=debezium, beside the slots' table: a paused connector's slot rising, then falling."""


@dataclass
class Line:
    name: str
    colour: str
    points: str
    """SVG polyline points."""
    last: float


def byte_size(count: float) -> str:
    """Bytes as a reader takes them in: 512 B, 83.0 kB, 17.4 MB, 1.2 GB."""
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("kB", 1 << 10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count:.0f} B"


@dataclass
class Chart:
    title: str
    unit: str
    top: float = 0.0
    lines: list[Line] = field(default_factory=list)
    error: str = ""

    def shown(self, value: float) -> str:
        """One of the chart's values with its unit."""
        return byte_size(value) if self.unit == BYTES else f"{value:.3g}{self.unit}"


def polyline(samples: list[tuple[float, float]], start: float, end: float, top: float) -> str:
    """Samples (time, value) as SVG points in a WIDTH × HEIGHT box, y up, scaled to `top`."""
    span, ceiling = max(end - start, 1e-9), max(top, 1e-9)
    return " ".join(
        f"{(at - start) / span * WIDTH:.1f},{HEIGHT - min(value, ceiling) / ceiling * HEIGHT:.1f}"
        for at, value in samples
    )


def draw(spec: ChartSpec, series: list[tuple[str, list[tuple[float, float]]]], start: float, end: float) -> Chart:
    """One chart; time runs from the first sample (or `start`, when it is later) to `end`."""
    values = [value for _, samples in series for _, value in samples if value == value]  # NaN dropped
    start = max(start, min((at for _, samples in series for at, _ in samples), default=start))
    top = max(values, default=0.0)
    chart = Chart(spec.title, spec.unit, top)
    for n, (name, samples) in enumerate(sorted(series)):
        finite = [(at, value) for at, value in samples if value == value]
        chart.lines.append(
            Line(name, COLOURS[n % len(COLOURS)], polyline(finite, start, end, top), finite[-1][1] if finite else 0.0)
        )
    return chart


def charts(prometheus_url: str, specs: tuple[ChartSpec, ...] = CHARTS, minutes: int = 10) -> list[Chart]:
    end = time.time()
    start = end - minutes * 60
    drawn = []
    with httpx.Client(base_url=prometheus_url, timeout=3) as client:
        for spec in specs:
            try:
                answer = client.get(
                    "/api/v1/query_range", params={"query": spec.expr, "start": start, "end": end, "step": 5}
                ).json()
                result = answer["data"]["result"] if answer.get("status") == "success" else []
            except (httpx.HTTPError, ValueError, KeyError) as error:
                drawn.append(Chart(spec.title, spec.unit, error=f"Prometheus did not answer ({type(error).__name__})"))
                continue
            series = [
                (
                    str(item["metric"].get(spec.label, spec.title)) if spec.label else spec.title,
                    [(float(at), float(value)) for at, value in item["values"]],
                )
                for item in result
            ]
            drawn.append(draw(spec, series, start, end))
    return drawn
