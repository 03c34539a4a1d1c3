"""How many orders are in each saga state, read when Prometheus scrapes (at most every 5 s)."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import psycopg
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from effectively_once.cached_reading import CachedReading
from services.orders.domain import OrderStatus

log = logging.getLogger(__name__)


class SagaStatesCollector(Collector):
    def __init__(self, database_url: str, every_seconds: float = 5) -> None:
        self._url = database_url
        self._reading = CachedReading(self._read, every_seconds)

    def _read(self) -> dict[str, float] | None:
        try:
            with psycopg.connect(self._url, connect_timeout=2, autocommit=True) as connection:
                rows = connection.execute("SELECT status, count(*) FROM customer_order GROUP BY status").fetchall()
        except psycopg.Error as error:  # the last figures stand; the scrape goes on
            log.debug("saga states unavailable: %s", error)
            return None
        return {str(status): float(count) for status, count in rows}

    def collect(self) -> Iterator[GaugeMetricFamily]:
        counts = self._reading.value()
        if counts is None:
            return
        family = GaugeMetricFamily("eo_saga_orders", "Orders in each saga state.", labels=["status"])
        for status in OrderStatus:
            family.add_metric([status.value], counts.get(status.value, 0.0))
        yield family
