"""The marker table's size, read when Prometheus scrapes (at most every 15 s): rows this consumer
keeps, the age of its oldest, and the bytes of the whole table with its indexes."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import psycopg
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from .cached_reading import CachedReading

log = logging.getLogger(__name__)


READING = """
SELECT (SELECT count(*) FROM processed_message WHERE consumer_name = %(c)s),
       (SELECT sum(pg_total_relation_size(relid)) FROM pg_partition_tree('processed_message')),
       coalesce(extract(epoch FROM now() - least(
           (SELECT min(id_time) FROM processed_message WHERE consumer_name = %(c)s AND id_time > '-infinity'),
           (SELECT min(processed_at) FROM processed_message_untimed WHERE consumer_name = %(c)s))), 0)
"""
"""This consumer's markers, the table's bytes (every partition with its indexes) and the age of its
oldest marker as retention counts it (the time its id carries; when it was processed, for an
untimed id)."""


class MarkerTableCollector(Collector):
    def __init__(self, database_url: str, consumer_name: str, every_seconds: float = 15) -> None:
        self._url = database_url
        self._consumer = consumer_name
        self._reading = CachedReading(self._read, every_seconds)

    def _read(self) -> tuple[float, float, float] | None:
        try:
            with psycopg.connect(self._url, connect_timeout=2, autocommit=True) as connection:
                row = connection.execute(READING, {"c": self._consumer}).fetchone()
        except psycopg.Error as error:  # the last figures stand; the scrape goes on
            log.debug("marker table size unavailable: %s", error)
            return None
        return (float(row[0]), float(row[1]), float(row[2])) if row else None

    def collect(self) -> Iterator[GaugeMetricFamily]:
        reading = self._reading.value()
        if reading is None:
            return
        for name, documentation, value in (
            ("eo_marker_rows", "Markers this consumer keeps (processed_message rows).", reading[0]),
            ("eo_marker_table_bytes", "The processed_message table with its indexes, in bytes.", reading[1]),
            ("eo_marker_oldest_seconds", "Age of the oldest marker this consumer keeps.", reading[2]),
        ):
            family = GaugeMetricFamily(name, documentation, labels=["consumer"])
            family.add_metric([self._consumer], value)
            yield family
