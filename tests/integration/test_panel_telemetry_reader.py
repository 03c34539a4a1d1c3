"""The panel's telemetry reader against the real broker: caught up, it gathers what arrives over a
quarter of a second into one fetch, where it used to send a fetch for every batch a process
produced (7 an order, the broker's busiest client: `make bench`, benchmarks/order_counts.py)."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from confluent_kafka import Producer
from prometheus_client import REGISTRY

from chaos_panel.reading.telemetry_store import TelemetryReader, TelemetryStore
from effectively_once.kafka_client import client_config
from services.settings import Settings
from services.topology import TELEMETRY_TOPIC
from tests.support.waiting import wait_for

BATCHES = 80
BATCH_GAP_SECONDS = 0.025


def _fetches() -> float:
    return REGISTRY.get_sample_value("eo_kafka_requests_total", {"kind": "Fetch"}) or 0.0


def test_a_caught_up_reader_fetches_a_few_times_a_second_whatever_the_rate(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KAFKA_STATISTICS_INTERVAL_MS", "100")  # the reader's client counts its requests
    reader = TelemetryReader(settings.kafka_bootstrap_servers, TelemetryStore())
    reader.start()
    try:
        assert reader.store.caught_up.wait(60), "the reader never reached the end of its topics"
        run = f"reader-probe-{uuid.uuid4().hex[:8]}"
        producer = Producer({**client_config(settings.kafka_bootstrap_servers), "acks": "all", "linger.ms": 0})
        before, started = _fetches(), time.monotonic()
        for n in range(BATCHES):
            key = f"{run}-{n}"
            record = {"at": time.time(), "kind": "probe", "key": key}
            producer.produce(TELEMETRY_TOPIC, key=key, value=json.dumps(record).encode())
            assert producer.flush(30) == 0  # each record its own batch, as each process's telemetry is
            time.sleep(BATCH_GAP_SECONDS)  # pacing the producer (40 batches a second), not waiting for a result

        def all_read() -> bool:
            with reader.store.lock:
                return all(f"{run}-{n}" in reader.store.by_key for n in range(BATCHES))

        wait_for(all_read, 30, f"the reader to take the {BATCHES} records")
        seconds, fetched = time.monotonic() - started, _fetches() - before
    finally:
        reader.stop()
    # Four fetches a second, give or take the ones under way at either end; a fetch answered at
    # each batch would be one per batch at least.
    assert fetched <= 4 * seconds + 4, f"{fetched:.0f} fetches for {BATCHES} batches in {seconds:.1f} s"
