"""How many orders are in each saga state, read when Prometheus scrapes (at most every 5 s)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import psycopg
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from services.orders.domain import OrderStatus

log = logging.getLogger(__name__)


class SagaStatesCollector(Collector):
    def __init__(self, database_url: str, every_seconds: float = 5) -> None:
        self._url = database_url
        self._every = every_seconds
        self._lock = threading.Lock()
        self._read_at = 0.0
        self._counts: dict[str, float] | None = None

    def _refresh(self) -> None:
        try:
            with psycopg.connect(self._url, connect_timeout=2, autocommit=True) as connection:
                rows = connection.execute("SELECT status, count(*) FROM customer_order GROUP BY status").fetchall()
            self._counts = {str(status): float(count) for status, count in rows}
        except psycopg.Error as error:  # the last figures stay; the scrape goes on
            log.debug("saga states unavailable: %s", error)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self._lock:
            if time.monotonic() - self._read_at >= self._every:
                self._read_at = time.monotonic()
                self._refresh()
            counts = self._counts
        if counts is not None:
            family = GaugeMetricFamily("eo_saga_orders", "Orders in each saga state.", labels=["status"])
            for status in OrderStatus:
                family.add_metric([status.value], counts.get(status.value, 0.0))
            yield family
