"""The contract suite's Kafka side: topics of a run's own, publishing, the runtime's loop in
process, and the team's consumer as a real process that can really crash."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from typing import IO, TYPE_CHECKING

from confluent_kafka import Consumer, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from .. import logs
from ..consumer import wiring
from ..dead_letters import dead_letter_headers
from ..faults import CRASH_EXIT_CODE
from ..kafka_client import client_config
from ..telemetry import NoTelemetry
from .record import Record

if TYPE_CHECKING:
    from .subject import Subject

__all__ = ["CRASH_EXIT_CODE", "ConsumerProcess", "Topics", "new_topics", "publish", "run_loop", "wait_for"]


class Topics:
    def __init__(self, events: str, dead_letters: str) -> None:
        self.events, self.dead_letters = events, dead_letters


def new_topics(bootstrap_servers: str, name: str) -> Topics:
    """An events topic and a dead-letter topic for one scenario run, one partition each."""
    run = f"{name}.{uuid.uuid4().hex[:6]}"
    topics = Topics(f"contract.{run}", f"contract.{run}.dlq")
    admin = AdminClient(client_config(bootstrap_servers))
    futures = admin.create_topics(
        [NewTopic(t, num_partitions=1, replication_factor=-1) for t in (topics.events, topics.dead_letters)]
    )
    for topic, future in futures.items():
        try:
            future.result(30)
        except KafkaException as error:
            raise RuntimeError(f"could not create the topic {topic}: {error}") from error
    return topics


def publish(
    bootstrap_servers: str, topic: str, values: Sequence[bytes], timestamps_ms: Sequence[int] | None = None
) -> None:
    """Publish `values` in order (the scenarios' topics have one partition), broker-confirmed;
    with `timestamps_ms`, each record carries its own create time."""
    records = [Record(value, None, ()) for value in values]
    publish_records(bootstrap_servers, topic, records, timestamps_ms)


def publish_records(
    bootstrap_servers: str, topic: str, records: Sequence[Record], timestamps_ms: Sequence[int] | None = None
) -> None:
    """Publish whole records (value, key, headers) in order, broker-confirmed; with
    `timestamps_ms`, each record carries its own create time."""
    producer = Producer({**client_config(bootstrap_servers), "acks": "all", "enable.idempotence": True})
    stamps = list(timestamps_ms) if timestamps_ms is not None else [0] * len(records)  # 0: now
    for record, stamp in zip(records, stamps, strict=True):
        producer.produce(topic, value=record.value, key=record.key, headers=list(record.headers), timestamp=stamp)
    if producer.flush(30) != 0:
        raise RuntimeError(f"the broker did not confirm the messages to {topic}")


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)


def _settings(subject: Subject) -> wiring.ConsumerSettings:
    return wiring.ConsumerSettings(
        DATABASE_URL=subject.database_url,
        KAFKA_BOOTSTRAP_SERVERS=subject.bootstrap_servers,
        MARKER_PURGE_INTERVAL_SECONDS=0,
        TELEMETRY_TOPIC="",
    )


def run_loop(subject: Subject, name: str, topics: Topics, until_handled: int, timeout: float = 90) -> int:
    """Run the runtime's Kafka loop in this process until it acknowledged `until_handled` messages."""
    loop = wiring.build(
        name,
        (topics.events,),
        subject.load_handlers(),
        _settings(subject),
        dead_letter_topic=topics.dead_letters,
        telemetry=NoTelemetry(),
    )
    deadline = time.monotonic() + timeout
    loop.run(until=lambda: loop.handled >= until_handled or time.monotonic() > deadline)
    return loop.handled


def dead_letter_reasons(bootstrap_servers: str, topic: str, count: int, timeout: float = 30) -> list[str]:
    """The reason the runtime gave each of the first `count` dead letters on `topic`."""
    return [headers.get("reason", "") for headers in dead_letters(bootstrap_servers, topic, count, timeout)]


def dead_letters(bootstrap_servers: str, topic: str, count: int, timeout: float = 30) -> list[dict[str, str]]:
    """The `eo-` headers (without the prefix) of the first `count` dead letters on `topic`."""
    consumer = Consumer(
        {**client_config(bootstrap_servers), "group.id": f"contract-reader-{uuid.uuid4().hex[:8]}",
         "auto.offset.reset": "earliest", "enable.auto.commit": False}
    )  # fmt: skip
    consumer.subscribe([topic])
    found: list[dict[str, str]] = []
    deadline = time.monotonic() + timeout
    try:
        while len(found) < count and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is None or message.error():
                continue
            found.append(dead_letter_headers(message))
    finally:
        consumer.close()
    return found


class ConsumerProcess:
    """The team's handlers in a real runtime process (`python -m effectively_once.contract.process`)."""

    def __init__(self, subject: Subject, name: str, topics: Topics, **environment: str) -> None:
        self._output: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - lives as long as the process
        variables = {
            **os.environ,
            "DATABASE_URL": subject.database_url,
            "KAFKA_BOOTSTRAP_SERVERS": subject.bootstrap_servers,
            "MARKER_PURGE_INTERVAL_SECONDS": "0",
            "TELEMETRY_TOPIC": "",
            "EO_FAULTS": "",
            "LOG_LEVEL": "DEBUG",  # each delivery's outcome is logged at DEBUG: outcomes_for reads it
            "PYTHONPATH": os.pathsep.join(path for path in sys.path if path),  # the modules this process sees
            **environment,
        }
        for inherited in ("CONTROL_PORT", "EO_INSTANCE_ID", "CONSUMER_MEMBERS", "CONSUMER_STRATEGY"):
            variables.pop(inherited, None)
        command = [sys.executable, "-m", "effectively_once.contract.process", name, topics.events]
        self.process = subprocess.Popen(
            [*command, topics.dead_letters, subject.handlers],
            env=variables,
            stdout=self._output,
            stderr=subprocess.STDOUT,
        )

    def wait(self, timeout: float) -> int:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
            return -1

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.wait(30)

    @property
    def output(self) -> str:
        self._output.seek(0)
        return self._output.read().decode(errors="replace")

    def outcomes_for(self, message_id: str) -> list[str]:
        return [e["outcome"] for e in logs.entries(self.output) if e.get("message_id") == message_id and "outcome" in e]

    def tail(self, lines: int = 20) -> str:
        return "\n".join(self.output.splitlines()[-lines:])
