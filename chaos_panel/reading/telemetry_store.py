"""The panel's memory of what happened: telemetry records and dead letters, read from Kafka.

A background thread reads `platform.telemetry` and every dead-letter topic from the beginning
(no consumer group: nothing is committed, a restarted panel reads it all again) and keeps a
bounded window in memory, indexed by order key. Caught up, it fetches about four times a
second, whatever the rate records come at.
"""

from __future__ import annotations

import json
import logging
import threading
from collections import defaultdict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from auditor.dead_letters import DeadLetter, dead_letter_of, read_to_end
from effectively_once.kafka_client import client_config
from services.topology import CONSUMERS, TELEMETRY_TOPIC, TOPIC_PARTITIONS

log = logging.getLogger(__name__)

MAX_RECORDS = 200_000
MAX_DEAD_LETTERS = 5_000
FETCH_WAIT_MS = 250
"""How long the broker holds the reader's fetch to gather records: what the panel shows is at most
this much later than what happened."""


@dataclass
class TelemetryStore:
    """Records in arrival order, by order key, and the process starts."""

    records: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=MAX_RECORDS))
    by_key: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: defaultdict(list))
    starts: list[dict[str, Any]] = field(default_factory=list)
    dead_letters: deque[DeadLetter] = field(default_factory=lambda: deque(maxlen=MAX_DEAD_LETTERS))
    lock: threading.Lock = field(default_factory=threading.Lock)
    caught_up: threading.Event = field(default_factory=threading.Event)

    def add(self, record: dict[str, Any]) -> None:
        if record.get("kind") == "deliveries":  # a batch's deliveries, told as one record
            for item in record.get("items") or []:
                if isinstance(item, dict):
                    self.add({**{k: v for k, v in record.items() if k != "items"}, **item, "kind": "delivery"})
            return
        with self.lock:
            self.records.append(record)
            keys = list(record.get("keys") or [])
            if record.get("key"):
                keys.append(record["key"])
            for key in dict.fromkeys(keys):
                self.by_key[str(key)].append(record)
            if record.get("kind") == "started":
                self.starts.append(record)

    def add_dead_letter(self, letter: DeadLetter) -> None:
        with self.lock:
            self.dead_letters.append(letter)

    def for_key(self, key: str) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.by_key.get(key, ()))

    def starts_between(self, first: float, last: float) -> list[dict[str, Any]]:
        with self.lock:
            return [start for start in self.starts if first <= start["at"] <= last]

    def restarts(self) -> dict[str, int]:
        """Process name -> starts after its first within the current run (EO_RUN_ID)."""
        with self.lock:
            runs: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
            latest_run: dict[str, tuple[float, str]] = {}
            for start in self.starts:
                process, run = start.get("process", "?"), start.get("run_id", "")
                runs[process][run] += 1
                if process not in latest_run or start["at"] >= latest_run[process][0]:
                    latest_run[process] = (start["at"], run)
            return {process: runs[process][run] - 1 for process, (_, run) in latest_run.items()}

    def recent(self, kinds: Iterable[str], limit: int = 50) -> list[dict[str, Any]]:
        wanted = set(kinds)
        with self.lock:
            found = [record for record in reversed(self.records) if record.get("kind") in wanted]
        return found[:limit]


class TelemetryReader:
    """Fills a TelemetryStore from Kafka until stopped."""

    def __init__(self, bootstrap_servers: str, store: TelemetryStore) -> None:
        self._bootstrap = bootstrap_servers
        self.store = store
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name="telemetry-reader", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()

    def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                self._read()
            except KafkaException as error:
                log.warning("telemetry reader: %s; starting again in 5 s", error)
                self._stopping.wait(5)

    def _read(self) -> None:
        consumer = Consumer(
            {
                **client_config(self._bootstrap),
                "group.id": "chaos-panel-reader",  # never joins: partitions are assigned, nothing committed
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "log_level": 3,
                # A fetch waits for a quarter of a second's records: answered at each record, it
                # cost the broker a request per telemetry batch of every process (7 an order).
                "fetch.wait.max.ms": FETCH_WAIT_MS,
                "fetch.min.bytes": 1_048_576,
            }
        )
        topics = [TELEMETRY_TOPIC, *(c.dead_letter_topic for c in CONSUMERS)]
        partitions = [TopicPartition(t, p, OFFSET_BEGINNING) for t in topics for p in range(TOPIC_PARTITIONS)]
        consumer.assign(partitions)
        at_end: set[tuple[str, int]] = set()
        try:
            while not self._stopping.is_set():
                for message in consumer.consume(500, 0.5):
                    error = message.error()
                    if error is not None:
                        if error.code() == KafkaError._PARTITION_EOF:
                            at_end.add((message.topic() or "", message.partition() or 0))
                            if len(at_end) == len(partitions):
                                self.store.caught_up.set()
                        continue
                    self._take(message)
        finally:
            consumer.close()

    def _take(self, message: Any) -> None:
        if message.topic() == TELEMETRY_TOPIC:
            try:
                record = json.loads(message.value())
            except (TypeError, ValueError):
                return  # not ours; telemetry is best effort
            if isinstance(record, dict) and isinstance(record.get("at"), int | float):
                self.store.add(record)
        else:
            self.store.add_dead_letter(dead_letter_of(message))


def read_telemetry(bootstrap_servers: str, since: float = 0.0, timeout: float = 60) -> list[dict[str, Any]]:
    """Every telemetry record told at or after `since` (epoch seconds), batches spread out."""
    store = TelemetryStore(records=deque())

    def take(message: Any) -> None:
        try:
            record = json.loads(message.value())
        except (TypeError, ValueError):
            return
        if isinstance(record, dict) and isinstance(record.get("at"), int | float) and record["at"] >= since:
            store.add(record)

    read_to_end(bootstrap_servers, [TELEMETRY_TOPIC], take, timeout)
    return list(store.records)
