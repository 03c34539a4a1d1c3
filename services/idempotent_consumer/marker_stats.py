"""The marker table's size, read when Prometheus scrapes (at most every 15 s): rows this consumer
keeps, and the bytes of the whole table with its indexes."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator

import psycopg
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)


class MarkerTableCollector(Collector):
    def __init__(self, database_url: str, consumer_name: str, every_seconds: float = 15) -> None:
        self._url = database_url
        self._consumer = consumer_name
        self._every = every_seconds
        self._lock = threading.Lock()
        self._read_at = 0.0
        self._rows: float | None = None
        self._bytes: float | None = None

    def _refresh(self) -> None:
        try:
            with psycopg.connect(self._url, connect_timeout=2, autocommit=True) as connection:
                row = connection.execute(
                    "SELECT (SELECT count(*) FROM processed_message WHERE consumer_name = %s), "
                    "pg_total_relation_size('processed_message')",
                    (self._consumer,),
                ).fetchone()
            if row:
                self._rows, self._bytes = float(row[0]), float(row[1])
        except psycopg.Error as error:  # the last figures stay; the scrape goes on
            log.debug("marker table size unavailable: %s", error)

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self._lock:
            if time.monotonic() - self._read_at >= self._every:
                self._read_at = time.monotonic()
                self._refresh()
            rows, size = self._rows, self._bytes
        if rows is not None and size is not None:
            yield _one("eo_marker_rows", "Markers this consumer keeps (processed_message rows).", self._consumer, rows)
            yield _one(
                "eo_marker_table_bytes", "The processed_message table with its indexes, in bytes.", self._consumer, size
            )


def _one(name: str, documentation: str, consumer: str, value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation, labels=["consumer"])
    family.add_metric([consumer], value)
    return family
