"""The transactional outbox and the relay, against real PostgreSQL and Kafka."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from confluent_kafka import Message
from prometheus_client import REGISTRY

from effectively_once.consumer import wiring
from effectively_once.envelope import decode
from effectively_once.faults import CRASH_EXIT_CODE
from effectively_once.outbox import add_to_outbox
from effectively_once.relay import claim
from effectively_once.relay.worker import BACKLOG_INTERVAL_SECONDS, DatabaseRelay
from infra.launcher.kafka_broker import ensure_topics
from infra.launcher.supervisor import Supervisor
from services.settings import PROJECT_ROOT, Settings
from services.topology import database
from tests.support.launcher_run import LauncherRun
from tests.support.outbox import make_relay, read_topic, write_events
from tests.support.waiting import wait_for
from workbench.ledger import LEDGER_ENTRY, entry, ledger_handler, ledger_rows


@pytest.fixture
def topic(settings: Settings) -> str:
    name = f"test.outbox.{uuid.uuid4().hex[:10]}"
    ensure_topics(settings.kafka_bootstrap_servers, (name,))
    return name


def unpublished(url: str) -> int:
    with psycopg.connect(url) as connection:
        row = connection.execute("SELECT count(*) FROM outbox WHERE published_at IS NULL").fetchone()
    return int(row[0]) if row else 0


def assert_per_key_order(messages: list[Message]) -> None:
    """Within each key, the events arrive in the order they were committed."""
    seen: dict[str, list[int]] = defaultdict(list)
    for message in messages:
        event = decode(message.value())
        seen[event.key].append(int(event.payload["sequence"]))
    for key, sequences in seen.items():
        firsts = list(dict.fromkeys(sequences))  # a republished duplicate may repeat a number
        assert firsts == sorted(firsts), f"key {key} out of order: {sequences}"


@pytest.fixture
def relays() -> Iterator[list[threading.Thread]]:
    started: list[threading.Thread] = []
    yield started


def start(relay: DatabaseRelay) -> threading.Thread:
    thread = threading.Thread(target=relay.run, daemon=True)
    thread.start()
    return thread


def test_a_rolled_back_transaction_leaves_no_outbox_row_and_publishes_nothing(
    settings: Settings,
    outbox_url: str,
    topic: str,
) -> None:
    with psycopg.connect(outbox_url) as connection:
        with pytest.raises(RuntimeError), connection.transaction():
            add_to_outbox(connection, entry("order-1"), topic)
            raise RuntimeError("the business change failed")
        row = connection.execute("SELECT count(*) FROM outbox").fetchone()
    assert row == (0,)
    relay = make_relay(outbox_url, settings.kafka_bootstrap_servers)
    with psycopg.connect(outbox_url, autocommit=True) as work:
        assert relay.relay_once(work) == 0


def test_the_outbox_writer_refuses_a_connection_outside_a_transaction(outbox_url: str, topic: str) -> None:
    with psycopg.connect(outbox_url, autocommit=True) as connection, pytest.raises(RuntimeError):
        add_to_outbox(connection, entry("order-1"), topic)


def test_the_relay_publishes_every_row_in_key_order_and_marks_it_published(
    settings: Settings,
    outbox_url: str,
    topic: str,
) -> None:
    ids = write_events(outbox_url, topic, [f"order-{k}" for k in range(5)], per_key=10)
    relay = make_relay(outbox_url, settings.kafka_bootstrap_servers)
    with psycopg.connect(outbox_url, autocommit=True) as work:
        while relay.relay_once(work):
            pass
    assert unpublished(outbox_url) == 0
    messages = read_topic(settings.kafka_bootstrap_servers, topic, len(ids))
    assert sorted(decode(m.value()).message_id for m in messages) == sorted(ids)
    assert all(m.key() == decode(m.value()).key.encode() for m in messages)
    assert_per_key_order(messages)


def test_a_claim_locks_exactly_the_keys_it_returns_and_skips_one_another_holds(outbox_url: str, topic: str) -> None:
    keys = [f"order-{uuid.uuid4().hex[:8]}-{k}" for k in range(5)]
    write_events(outbox_url, topic, keys, per_key=2)
    held = keys[0]  # the oldest rows' key, another relay's for now

    def advisory_locks(connection: psycopg.Connection[Any]) -> set[int]:
        rows = connection.execute(
            "SELECT objid FROM pg_locks WHERE locktype = 'advisory' AND classid = %s AND pid = %s",
            (claim.ADVISORY_LOCK_CLASS, connection.info.backend_pid),
        ).fetchall()
        return {int(row[0]) for row in rows}

    def hashes(connection: psycopg.Connection[Any], of: list[str]) -> set[int]:
        rows = connection.execute("SELECT hashtext(key)::oid::bigint FROM unnest(%s::text[]) AS key", (of,))
        return {int(row[0]) for row in rows}

    with psycopg.connect(outbox_url) as other, psycopg.connect(outbox_url) as relay:
        other.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (claim.ADVISORY_LOCK_CLASS, held))
        rows = claim.claim(relay, keys=2, rows=100)
        claimed = list(dict.fromkeys(row.key for row in rows))
        # The two oldest keys are the candidates: the held one is skipped, never waited for, and
        # no key beyond the candidates is locked (nor returned) in its place.
        assert claimed == keys[1:2]
        assert advisory_locks(relay) == hashes(relay, claimed)
        relay.rollback()
        other.rollback()


def test_the_relay_wakes_on_notify_and_publishes_within_moments_of_a_commit(
    settings: Settings,
    outbox_url: str,
    topic: str,
) -> None:
    relay = make_relay(outbox_url, settings.kafka_bootstrap_servers, RELAY_POLL_INTERVAL_SECONDS=30)
    thread = start(relay)
    try:
        # Once idle, it waits up to 30 s on LISTEN: only a NOTIFY can wake it sooner.
        wait_for(relay.idle.is_set, 10, "the relay to go idle")
        write_events(outbox_url, topic, ["order-1"], per_key=1)
        wait_for(lambda: relay.published == 1, 10, "the notified relay to publish")
    finally:
        relay.stop()
        thread.join(40)


def run_relay_process(url: str, bootstrap: str, **environment: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "effectively_once.relay"],
        cwd=PROJECT_ROOT,
        env={
            **os.environ,
            "PYTHONPATH": str(PROJECT_ROOT),
            "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
            "OUTBOX_DATABASE_URLS": json.dumps({"test": url}),
            "RELAY_POLL_INTERVAL_SECONDS": "0.2",
            **environment,
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def test_a_crash_after_publish_before_mark_republishes_the_same_id_and_a_consumer_applies_it_once(
    settings: Settings,
    outbox_url: str,
    topic: str,
    runtime_db: str,
    name: str,
) -> None:
    bootstrap = settings.kafka_bootstrap_servers
    ids = write_events(outbox_url, topic, ["order-1", "order-2"], per_key=3)

    crashing = run_relay_process(outbox_url, bootstrap, EO_FAULTS="relay.after_publish_before_mark=crash")
    output, _ = crashing.communicate(timeout=60)
    assert crashing.returncode == CRASH_EXIT_CODE, output.decode()
    assert unpublished(outbox_url) == len(ids)  # published, but never marked

    restarted = run_relay_process(outbox_url, bootstrap)
    try:
        wait_for(lambda: unpublished(outbox_url) == 0, 60, "the restarted relay to mark every row")
    finally:
        restarted.send_signal(signal.SIGTERM)
        restarted.communicate(timeout=30)
    assert restarted.returncode == 0

    messages = read_topic(bootstrap, topic, 2 * len(ids))
    published = [decode(m.value()).message_id for m in messages]
    assert sorted(published) == sorted(ids * 2), "every row went out twice, with the same id"
    assert_per_key_order(messages)

    loop = wiring.build(
        name,
        (topic,),
        {LEDGER_ENTRY: ledger_handler(name)},
        wiring.ConsumerSettings(DATABASE_URL=runtime_db, KAFKA_BOOTSTRAP_SERVERS=bootstrap),
        dead_letter_topic=f"{topic}.dlq",
    )
    deadline = time.monotonic() + 60
    loop.run(until=lambda: loop.handled >= 2 * len(ids) or time.monotonic() > deadline)
    assert loop.handled == 2 * len(ids)
    for message_id in ids:
        assert ledger_rows(runtime_db, name, message_id) == 1
    duplicates = REGISTRY.get_sample_value(
        "eo_consumer_messages_total",
        {"consumer": name, "event_type": LEDGER_ENTRY, "outcome": "duplicate", "strategy": "correct"},
    )
    assert duplicates == len(ids)


def test_two_relays_on_one_database_never_publish_a_row_twice_and_keep_per_key_order(
    settings: Settings,
    outbox_url: str,
    topic: str,
) -> None:
    bootstrap = settings.kafka_bootstrap_servers
    first = make_relay(outbox_url, bootstrap, RELAY_BATCH_SIZE=50, RELAY_KEYS_PER_BATCH=20)
    second = make_relay(outbox_url, bootstrap, RELAY_BATCH_SIZE=50, RELAY_KEYS_PER_BATCH=20)
    threads = [start(first), start(second)]
    try:
        keys = [f"order-{k}" for k in range(100)]
        writers = [threading.Thread(target=write_events, args=(outbox_url, topic, keys[i::4], 10)) for i in range(4)]
        for writer in writers:
            writer.start()
        for writer in writers:
            writer.join(120)
        wait_for(lambda: unpublished(outbox_url) == 0, 120, "both relays to publish all 1,000 rows")
    finally:
        first.stop()
        second.stop()
        for thread in threads:
            thread.join(30)
    messages = read_topic(bootstrap, topic, 1000)
    ids = [decode(m.value()).message_id for m in messages]
    assert len(ids) == 1000 and len(set(ids)) == 1000, "a row was published twice"
    assert first.published + second.published == 1000
    assert_per_key_order(messages)


@pytest.fixture
def separate_kafka() -> Iterator[tuple[str, Supervisor]]:
    """A broker of this test's own (under its own supervisor), so it can be stopped and started."""
    stack = LauncherRun()
    result = stack.launcher("up", "--infra-only")
    assert result.returncode == 0, result.stdout + result.stderr
    try:
        yield f"127.0.0.1:{stack.ports['KAFKA_PORT']}", Supervisor(stack.state_dir)
    finally:
        stack.launcher("down")
        stack.remove()


def failed_attempts(url: str) -> int:
    with psycopg.connect(url) as connection:
        row = connection.execute(
            "SELECT count(*) FROM outbox WHERE published_at IS NULL AND last_error IS NOT NULL"
        ).fetchone()
    return int(row[0]) if row else 0


def test_with_the_broker_stopped_rows_wait_unpublished_and_go_out_when_it_returns(
    outbox_url: str,
    separate_kafka: tuple[str, Supervisor],
) -> None:
    bootstrap, supervisor = separate_kafka
    topic = f"test.outbox.{uuid.uuid4().hex[:10]}"
    ensure_topics(bootstrap, (topic,))
    relay = make_relay(
        outbox_url,
        bootstrap,
        RELAY_DELIVERY_TIMEOUT_SECONDS=2,
        RELAY_RETRY_BASE_SECONDS=0.2,
        RELAY_RETRY_CAP_SECONDS=1,
    )
    thread = start(relay)
    try:
        before = write_events(outbox_url, topic, ["order-1", "order-2"], per_key=5)
        wait_for(lambda: unpublished(outbox_url) == 0, 60, "the first rows to be published")

        supervisor.stop("kafka")
        during = write_events(outbox_url, topic, ["order-1", "order-2"], per_key=5)
        wait_for(lambda: failed_attempts(outbox_url) > 0, 60, "the relay to record a failed attempt")
        assert unpublished(outbox_url) == len(during)

        supervisor.start("kafka")
        wait_for(lambda: unpublished(outbox_url) == 0, 120, "the rows to go out once the broker is back")
    finally:
        relay.stop()
        thread.join(30)
    messages = read_topic(bootstrap, topic, len(before) + len(during))
    assert {decode(m.value()).message_id for m in messages} == set(before + during)
    assert_per_key_order(messages)


def test_the_relay_role_publishes_a_service_databases_outbox_and_may_touch_nothing_else(
    settings: Settings,
    topic: str,
) -> None:
    orders = database("orders")
    event = entry(f"order-{uuid.uuid4().hex[:8]}")
    with psycopg.connect(settings.service_database_url(orders)) as connection, connection.transaction():
        add_to_outbox(connection, event, topic)
    relay_url = settings.relay_database_url(orders)
    relay = make_relay(relay_url, settings.kafka_bootstrap_servers)
    with psycopg.connect(relay_url, autocommit=True) as work:

        def published() -> bool:
            relay.relay_once(work)  # (a running `make up` relay may get there first: either counts)
            row = work.execute(
                "SELECT published_at IS NOT NULL FROM outbox WHERE message_id = %s", (event.message_id,)
            ).fetchone()
            return row == (True,)

        wait_for(published, 30, "the row to be published through the relay role")
        relay.purge(work)  # it makes the outbox's days ahead ready and drops expired ones: granted
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            work.execute("SELECT count(*) FROM processed_message")
    assert [decode(m.value()).message_id for m in read_topic(settings.kafka_bootstrap_servers, topic, 1)] == [
        event.message_id
    ]


def test_published_rows_are_purged_after_the_retention_horizon_and_unpublished_ones_never(
    settings: Settings,
    outbox_url: str,
    topic: str,
) -> None:
    ids = write_events(outbox_url, topic, ["order-1"], per_key=6)
    with psycopg.connect(outbox_url) as connection:
        connection.execute(
            "UPDATE outbox SET created_at = now() - interval '3 days', published_at = now() - interval '3 days' "
            "WHERE message_id = ANY(%s)",
            (ids[:4],),
        )
        connection.execute(
            "UPDATE outbox SET created_at = now() - interval '1 hour', published_at = now() - interval '1 hour' "
            "WHERE message_id = %s",
            (ids[4],),
        )
    relay = make_relay(outbox_url, settings.kafka_bootstrap_servers, OUTBOX_RETENTION_HOURS=24)
    with psycopg.connect(outbox_url, autocommit=True) as work:
        relay.purge(work)
        remaining = {row[0] for row in work.execute("SELECT message_id FROM outbox")}
    assert remaining == {ids[4], ids[5]}


def test_the_relay_survives_its_database_connections_being_cut_and_goes_on_publishing(
    settings: Settings,
    outbox_url: str,
    topic: str,
) -> None:
    relay = make_relay(outbox_url, settings.kafka_bootstrap_servers)
    thread = start(relay)
    try:
        write_events(outbox_url, topic, ["order-1"], per_key=3)
        wait_for(lambda: unpublished(outbox_url) == 0, 30, "the first rows")
        wait_for(relay.idle.is_set, 10, "the relay to go idle")
        with psycopg.connect(outbox_url, autocommit=True) as admin:
            cut = admin.execute(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() AND query ILIKE '%%outbox%%'"
            ).fetchone()
        assert cut and cut[0] >= 1
        write_events(outbox_url, topic, ["order-1"], per_key=3)
        wait_for(lambda: unpublished(outbox_url) == 0, 60, "the relay to reconnect and publish the rest")
    finally:
        relay.stop()
        thread.join(30)
    assert thread.is_alive() is False
    assert relay.published == 6


COMMITS = 100
COMMITS_PER_SECOND = 100


def _steady_commits(url: str, topic: str) -> None:
    """COMMITS one-row transactions at COMMITS_PER_SECOND, as a service under steady load commits:
    each notification reaches the relay on its own (a burst's arrive together)."""
    with psycopg.connect(url) as connection:
        started = time.monotonic()
        for n in range(COMMITS):
            with connection.transaction():
                add_to_outbox(connection, entry(f"order-{n}"), topic)
            time.sleep(max(0.0, started + (n + 1) / COMMITS_PER_SECOND - time.monotonic()))  # the load's pace


def test_a_relay_claims_once_a_wake_up_unless_its_batch_was_full_and_reads_its_gauges_once_a_second(
    settings: Settings, outbox_url: str, topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each commit notifies. A wake-up used to cost three transactions: the claim, a claim again
    that found nothing, and the backlog gauges. A claim under the batch's limit took every row then
    claimable, so the relay waits (the notifications of later commits wake it at once)."""
    events: list[str | int] = []
    gauges: list[float] = []
    real_claim, real_backlog = claim.claim, claim.backlog

    def counted_claim(*arguments: Any, **named: Any) -> list[claim.OutboxRow]:
        rows = real_claim(*arguments, **named)
        events.append(len(rows))
        return rows

    def counted_backlog(*arguments: Any, **named: Any) -> tuple[int, float]:
        gauges.append(time.monotonic())
        return real_backlog(*arguments, **named)

    monkeypatch.setattr(claim, "claim", counted_claim)
    monkeypatch.setattr(claim, "backlog", counted_backlog)
    relay = make_relay(outbox_url, settings.kafka_bootstrap_servers, RELAY_POLL_INTERVAL_SECONDS=30, RELAY_BATCH_SIZE=8)
    waiting = relay._wait_for_notification

    def counted_wait(listen: Any) -> None:
        events.append("wait")
        waiting(listen)

    monkeypatch.setattr(relay, "_wait_for_notification", counted_wait)
    thread = start(relay)
    try:
        wait_for(relay.idle.is_set, 10, "the relay to go idle")
        started = time.monotonic()
        _steady_commits(outbox_url, topic)
        wait_for(lambda: relay.published == COMMITS, 30, "the relay to publish every row")
        seconds = time.monotonic() - started
    finally:
        relay.stop()
        thread.join(40)
    again = [
        (before, after)
        for before, after in itertools.pairwise(events)
        if isinstance(before, int) and before < 8 and isinstance(after, int)
    ]
    assert not again, f"claimed again after a batch under its limit, before waiting: {again[:5]} in {events[:40]}"
    read = [at for at in gauges if at >= started]
    assert len(read) <= seconds / BACKLOG_INTERVAL_SECONDS + 2, f"the gauges read {len(read)} times in {seconds:.1f} s"
