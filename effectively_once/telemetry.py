"""Delivery telemetry: what each process did with each message, told to a Kafka topic as it happens.

The chaos panel reads `platform.telemetry` to draw each order's timeline: every delivery to every
consumer with its outcome, every fault that fired (with the messages in hand), every process
start. Records carry identifiers (message id, order key, event type), never payloads.

Sending is fire-and-forget: telemetry never slows a transaction down or changes an outcome. The
one exception is a crash, which waits (briefly) for its record and those before it to be sent,
because the process is about to lose them.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from typing import Any, Protocol

from confluent_kafka import KafkaException, Producer

from .kafka_client import client_config

log = logging.getLogger(__name__)

TELEMETRY_TOPIC = "platform.telemetry"
"""The same name as services.topology.TELEMETRY_TOPIC (the runtime does not import the platform's topology)."""
MAX_IDS_PER_RECORD = 50


class Telemetry(Protocol):
    """Where a process tells what happened (deliveries, faults, starts), for the panel to show."""

    def emit(self, kind: str, **fields: Any) -> None:
        """Tell one record of `kind` with `fields` (ids, never payloads); never blocks, never raises."""
        ...

    def flush(self, timeout: float) -> None:
        """Wait up to `timeout` seconds for the records told so far to leave the process."""
        ...


class NoTelemetry:
    """Telemetry switched off (TELEMETRY_TOPIC empty), and the default of unit tests."""

    def emit(self, kind: str, **fields: Any) -> None:
        pass

    def flush(self, timeout: float) -> None:
        pass


class KafkaTelemetry:
    """One process's telemetry producer."""

    def __init__(
        self,
        bootstrap_servers: str,
        process: str,
        instance: str | None = None,
        topic: str = TELEMETRY_TOPIC,
        run_id: str = "",
    ):
        self.topic = topic
        self.process = process
        self.instance = instance or f"{process}@{socket.gethostname()}"
        self.run_id = run_id
        own = json.dumps(
            {"process": self.process, "instance": self.instance, "pid": os.getpid(), "run_id": self.run_id}
        )
        self._prefix = own[:-1] + ", "
        self._since_poll = 0
        self._producer = Producer(
            {
                **client_config(bootstrap_servers),
                "acks": "1",
                "linger.ms": 20,
                "queue.buffering.max.messages": 100_000,
                "message.timeout.ms": 30_000,
                "log_level": 3,
            }
        )

    def emit(self, kind: str, **fields: Any) -> None:
        # The process's own fields are serialised once; each record adds only its own. Nothing
        # waits for a delivery report, so the client is polled now and then, not on every record.
        body = json.dumps({name: value for name, value in fields.items() if value is not None}, default=str)
        record = f'{self._prefix}"kind": "{kind}", "at": {time.time()}{", " + body[1:] if len(body) > 2 else "}"}'
        key = fields.get("key")
        try:
            self._producer.produce(self.topic, record.encode(), key.encode() if isinstance(key, str) else None)
        except (BufferError, KafkaException) as error:  # a full queue or a gone broker: drop, never block
            log.debug("telemetry dropped: %s", error)
        self._since_poll += 1
        if self._since_poll >= 1000:
            self._since_poll = 0
            self._producer.poll(0)

    def flush(self, timeout: float) -> None:
        self._producer.flush(timeout)


def connect(bootstrap_servers: str, process: str, instance: str | None, topic: str, run_id: str = "") -> Telemetry:
    """Telemetry to `topic`, or none when the topic is empty; `run_id` is the supervisor's run."""
    if not topic:
        return NoTelemetry()
    return KafkaTelemetry(bootstrap_servers, process, instance, topic, run_id)


def report_faults(telemetry: Telemetry) -> Any:
    """A FaultPoints listener that records each firing, flushing first when it is a crash."""

    def on_fire(point: str, action: str, context: dict[str, object]) -> None:
        telemetry.emit("fault", point=point, action=action, **context)
        if action == "crash":
            telemetry.flush(2.0)

    return on_fire


def ids(values: list[str]) -> list[str]:
    """At most MAX_IDS_PER_RECORD identifiers, distinct, in order."""
    return list(dict.fromkeys(values))[:MAX_IDS_PER_RECORD]
