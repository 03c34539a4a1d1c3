"""The projection's rate with 2, 3 and 6 members on a topic of 3 partitions, as a consumer group
and as a share group, in one run: how fast the members drain a pre-filled topic together.

A consumer group uses at most one member per partition (with 6 members, 3 wait); a share group
hands records to all of them, and acknowledges each on its own (one round trip per poll). The
members run as threads of this process, each with its own Kafka client and database connection,
as CONSUMER_MEMBERS and CONSUMER_SHARE_MEMBERS run them in one consumer process: on two cores,
what more members buy is bounded by the process's one interpreter as much as by the group.
"""

from __future__ import annotations

import argparse
import logging
import threading
import time
import uuid
from collections.abc import Callable, Sequence

from benchmarks.consumer_throughput import database_url, prefill
from benchmarks.own_system import default_infrastructure
from benchmarks.rows import Row, table, write_json
from effectively_once.consumer import wiring
from effectively_once.consumer.loop import ConsumerLoop
from effectively_once.consumer.share_loop import ShareGroupLoop, share_group_id
from infra.launcher import kafka_broker
from services.settings import PROJECT_ROOT, Settings
from services.topology import TOPIC_PARTITIONS
from workbench.ledger import LEDGER_ENTRY, entry, ledger_handler

RESULTS = PROJECT_ROOT / "artifacts" / "bench" / "share-groups.json"
MEMBER_COUNTS = (2, 3, 6)
KINDS = ("consumer group", "share group")


def _say(message: str) -> None:
    print(f"  · {message}", flush=True)


def _members(settings: Settings, url: str, topic: str, kind: str, count: int) -> list[ConsumerLoop | ShareGroupLoop]:
    name = f"bench-projection-{uuid.uuid4().hex[:8]}-v1"
    consumer_settings = wiring.ConsumerSettings(
        DATABASE_URL=url,
        KAFKA_BOOTSTRAP_SERVERS=settings.kafka_bootstrap_servers,
        CONSUMER_SHARE_GROUP=kind == "share group",
        MARKER_PURGE_INTERVAL_SECONDS=0,
    )
    handlers = {LEDGER_ENTRY: ledger_handler(name)}
    if kind == "share group":
        kafka_broker.ensure_share_groups(settings.kafka_bootstrap_servers, (share_group_id(name),))
        return [
            wiring.build_share_member(name, (topic,), handlers, consumer_settings, f"{topic}.dlq", purge=False)
            for _ in range(count)
        ]
    return [
        wiring.build(name, (topic,), handlers, consumer_settings, f"{topic}.dlq", purge=False) for _ in range(count)
    ]


def _rate(members: Sequence[ConsumerLoop | ShareGroupLoop], messages: int) -> tuple[float, int]:
    """(messages/s from the first message handled to the last, how many members handled any)."""
    first: list[float] = []
    finished = threading.Event()

    def handled() -> int:
        total = sum(member.handled for member in members)
        if total and not first:
            first.append(time.perf_counter())
        if total >= messages:
            finished.set()
        return total

    threads = [threading.Thread(target=member.run, kwargs={"until": finished.is_set}) for member in members]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 600
    while handled() < messages and time.monotonic() < deadline:
        finished.wait(0.01)
    elapsed = time.perf_counter() - first[0] if first else 0.0
    finished.set()
    for thread in threads:
        thread.join(timeout=60)
    if handled() < messages:
        raise SystemExit(f"bench: {handled()} of {messages} messages handled in 600 s")
    return (messages - 1) / elapsed, sum(1 for member in members if member.handled)


def measure(messages: int, say: Callable[[str], None] = _say) -> list[Row]:
    settings = default_infrastructure(say)
    url = database_url(settings)
    rates: dict[tuple[int, str], float] = {}
    rows: list[Row] = []
    for count in MEMBER_COUNTS:
        for kind in KINDS:
            topic = f"bench.projection.{uuid.uuid4().hex[:8]}"
            prefill(settings, topic, [entry(f"order-{n}", amount=1) for n in range(messages)])
            rate, working = _rate(_members(settings, url, topic, kind, count), messages)
            rates[(count, kind)] = rate
            say(f"{count} members, {kind}: {rate:,.0f} msg/s, {working} of them working")
            versus = f"; {rate / rates[(count, KINDS[0])]:.2f}× the consumer group's" if kind == KINDS[1] else ""
            rows.append(
                Row(
                    "share",
                    f"projection, {count} members, {kind.split()[0]}",
                    rate,
                    "msg/s",
                    detail=f"{messages:,} msgs over {TOPIC_PARTITIONS} partitions; {working} members worked{versus}",
                )
            )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=5_000, help="per case")
    arguments = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    print("share groups: the projection's members draining a pre-filled topic, consumer group and share group")
    rows = measure(arguments.messages)
    print("\n".join(["", *table(rows)]))
    print(f"\nwritten to {write_json(rows, RESULTS).relative_to(PROJECT_ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
