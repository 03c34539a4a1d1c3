"""A running process's Prometheus metric, read from its control endpoint's /metrics."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from infra.launcher.processes import control_urls
from services.settings import Settings


def metric(settings: Settings, process: str, name: str, **labels: str) -> float:
    """The sum of `process`'s samples of `name` whose labels include `labels` (0 when none)."""
    text = httpx.get(f"{control_urls(settings)[process]}/metrics", timeout=5).text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items())
    )
