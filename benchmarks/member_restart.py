"""What a member's crash and restart costs under each group protocol: a static member (its
`group.instance.id` kept) SIGKILLed and started again at once, and the time from the kill until
every partition it held is consumed again (an event published after the kill on each of them is
applied).

The member runs in a process of its own, restarted as a supervisor restarts one: at once after
any exit. Under the classic protocol the restarted member takes its partitions back by its
instance id; under the consumer protocol (KIP-848) the broker refuses the id until the old
member's session has ended (6 s here), and the member joins again with a fresh client each second
until it is let in (it would exit, and be started again, only after a minute of refusals).
"""

from __future__ import annotations

import argparse
import logging
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import Literal

import psycopg
from confluent_kafka import Producer

from benchmarks.consumer_throughput import database_url
from benchmarks.own_system import default_infrastructure
from benchmarks.rows import Row, table, write_json
from effectively_once.consumer import wiring
from effectively_once.consumer.deliveries import ClientFailed
from effectively_once.kafka_client import client_config
from infra.launcher import kafka_broker
from services.settings import PROJECT_ROOT, Settings
from services.topology import TOPIC_PARTITIONS
from workbench.ledger import LEDGER_ENTRY, entry, ledger_handler

RESULTS = PROJECT_ROOT / "artifacts" / "bench" / "member-restart.json"
Protocol = Literal["classic", "consumer"]
PROTOCOLS: tuple[Protocol, ...] = ("classic", "consumer")
ROUND_SECONDS = 0.05
"""An event on every partition this often, during the measurement."""


def _say(message: str) -> None:
    print(f"  · {message}", flush=True)


def member(url: str, bootstrap: str, topic: str, group: str, protocol: Protocol) -> int:
    """The member process: consume until killed; 70 when the client fails for good."""
    settings = wiring.ConsumerSettings(
        DATABASE_URL=url,
        KAFKA_BOOTSTRAP_SERVERS=bootstrap,
        CONSUMER_GROUP=group,
        CONSUMER_GROUP_PROTOCOL=protocol,
        EO_INSTANCE_ID=f"{group}-0",
        MARKER_PURGE_INTERVAL_SECONDS=0,
    )
    loop = wiring.build(group, (topic,), {LEDGER_ENTRY: ledger_handler(group)}, settings, f"{topic}.dlq")
    try:
        loop.run()
    except ClientFailed:
        return 70
    return 0


class _Supervised:
    """The member process, started again at once whenever it exits, until stopped."""

    def __init__(self, arguments: list[str]) -> None:
        self._arguments = arguments
        self._stop = threading.Event()
        self.process = self._start()
        self.starts = 1
        self._watcher = threading.Thread(target=self._watch, daemon=True)
        self._watcher.start()

    def _start(self) -> subprocess.Popen[bytes]:
        command = [sys.executable, "-m", "benchmarks.member_restart", "member", *self._arguments]
        return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def _watch(self) -> None:
        while not self._stop.is_set():
            if self.process.poll() is not None:
                self.process = self._start()
                self.starts += 1
            self._stop.wait(0.05)

    def kill(self) -> None:
        self.process.kill()

    def stop(self) -> None:
        self._stop.set()
        self._watcher.join()
        self.process.kill()
        self.process.wait()


def _applied(url: str, group: str) -> set[str]:
    with psycopg.connect(url, autocommit=True) as connection:
        rows = connection.execute("SELECT message_id::text FROM ledger WHERE consumer_name = %s", (group,))
        return {str(row[0]) for row in rows}


def _one_restart(settings: Settings, url: str, protocol: Protocol) -> tuple[float, int]:
    """(seconds from the kill until every partition is consumed again, member starts it took)."""
    run = uuid.uuid4().hex[:8]
    topic, group = f"bench.restart.{run}", f"bench-restart-{run}-v1"
    kafka_broker.ensure_topics(settings.kafka_bootstrap_servers, (topic, f"{topic}.dlq"))
    producer = Producer(client_config(settings.kafka_bootstrap_servers, {"acks": "all", "linger.ms": 0}))
    published: list[tuple[float, int, str]] = []  # (when, partition, message id)
    stop = threading.Event()

    def publish() -> None:
        n = 0
        while not stop.is_set():
            for partition in range(TOPIC_PARTITIONS):
                event = entry(f"order-{n}-{partition}", amount=1)
                producer.produce(topic, partition=partition, key=event.key.encode(), value=event.to_json())
                published.append((time.monotonic(), partition, event.message_id))
            producer.poll(0)
            n += 1
            stop.wait(ROUND_SECONDS)
        producer.flush(30)

    arguments = [url, settings.kafka_bootstrap_servers, topic, group, protocol]
    supervised = _Supervised(arguments)
    publisher = threading.Thread(target=publish)
    publisher.start()
    try:
        deadline = time.monotonic() + 120
        while len(_applied(url, group)) < 30 and time.monotonic() < deadline:  # consuming steadily
            time.sleep(0.1)
        starts_before = supervised.starts
        killed = time.monotonic()
        supervised.kill()
        while time.monotonic() < deadline:
            applied = _applied(url, group)
            after = {p for at, p, message_id in published if at > killed and message_id in applied}
            if len(after) == TOPIC_PARTITIONS:
                return time.monotonic() - killed, supervised.starts - starts_before
            time.sleep(0.05)
        raise SystemExit(f"bench: the {protocol} member did not consume again within 120 s")
    finally:
        stop.set()
        publisher.join()
        supervised.stop()


def measure(runs: int = 3, say: Callable[[str], None] = _say) -> list[Row]:
    settings = default_infrastructure(say)
    url = database_url(settings)
    rows = []
    for protocol in PROTOCOLS:
        results = [_one_restart(settings, url, protocol) for _ in range(runs)]
        seconds = [round(s, 2) for s, _ in results]
        starts = [n for _, n in results]
        say(f"{protocol}: {', '.join(f'{s:.2f} s' for s in seconds)} (member starts: {starts})")
        rows.append(
            Row(
                "groups",
                f"member crash and restart: {protocol}",
                statistics.median(seconds),
                "s",
                detail=f"median of {runs}: {', '.join(f'{s:.2f}' for s in seconds)} s; starts it took: {starts}; "
                "a static member SIGKILLed and started again at once, until each partition it held is consumed again",
            )
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    commands = parser.add_subparsers(dest="command")
    one = commands.add_parser("member", help="run one member (the bench starts these)")
    for name in ("url", "bootstrap", "topic", "group"):
        one.add_argument(name)
    one.add_argument("protocol", choices=PROTOCOLS)
    parser.add_argument("--runs", type=int, default=3)
    arguments = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    if arguments.command == "member":
        return member(arguments.url, arguments.bootstrap, arguments.topic, arguments.group, arguments.protocol)
    print("member restart: a static member SIGKILLed and started again, under each group protocol")
    rows = measure(arguments.runs)
    print("\n".join(["", *table(rows)]))
    print(f"\nwritten to {write_json(rows, RESULTS).relative_to(PROJECT_ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
