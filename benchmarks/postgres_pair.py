"""A synchronous standby beside one server: what a commit, an order and a failover cost.

Commit latency is measured on the one server of the run's default system first
(`on_one_server`), then on a system of its own with a primary and a standby (`POSTGRES=ha`, its
own state directory and ports, alone on the machine): one-row transactions one after another, each
committed durably (`synchronous_commit=on`), with the standby synchronous, then asynchronous
(switched on the running pair). On the same pair: the order latency case with the standby
synchronous, beside the one server's from earlier in the run, and one failover under that load
(how long the promotion and the old primary's rebuild took). The system is taken down afterwards.
"""

from __future__ import annotations

import dataclasses
import statistics
import threading
import time
from collections.abc import Sequence

import psycopg

from benchmarks import order_latency
from benchmarks.own_system import own_system
from benchmarks.rows import Row
from infra.launcher import postgres_cluster, postgres_pair, stack
from infra.launcher.supervisor import Supervisor
from services.orders.load import LoadResult, place_orders
from services.settings import Settings

COMMITS = 2_000
PORTS = {
    "POSTGRES_PORT": 26532,  # and 26533, the second node
    "KAFKA_PORT": 30192,
    "KAFKA_CONTROLLER_PORT": 30193,
    "CHAOS_PANEL_PORT": 18180,
    "ORDERS_API_PORT": 18100,
    "PAYMENT_PROVIDER_PORT": 18101,
    "MAIL_PORT": 18102,
    "PROMETHEUS_PORT": 19190,
    "CONTROL_PORT_BASE": 19200,
}
"""Beside the default system's and the three-node system's ports."""


def _say(message: str) -> None:
    print(f"  · {message}", flush=True)


def system() -> Settings:
    """The pair's settings: its own state directory and ports, the standby synchronous."""
    return own_system("postgres-pair", PORTS, POSTGRES="ha", POSTGRES_SYNC="on")


def commit_latencies(url: str, count: int = COMMITS) -> list[float]:
    """Milliseconds of each of `count` one-row transactions, one after another; sorted."""
    values = []
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute("CREATE TABLE IF NOT EXISTS bench_commit (n bigint NOT NULL, at timestamptz DEFAULT now())")
        try:
            for n in range(count):
                started = time.perf_counter()
                connection.execute("INSERT INTO bench_commit (n) VALUES (%s)", (n,))
                values.append((time.perf_counter() - started) * 1000)
        finally:
            connection.execute("DROP TABLE bench_commit")
    return sorted(values)


def _rows(values: list[float], where: str, single: list[float] | None) -> list[Row]:
    p50, p99 = statistics.median(values), statistics.quantiles(values, n=100)[98]
    rows = []
    for name, value in (("p50", p50), ("p99", p99)):
        compared = ""
        if single:
            base = statistics.median(single) if name == "p50" else statistics.quantiles(single, n=100)[98]
            compared = f"; {value / base:.2f}× one server's"
        rows.append(
            Row("postgres", f"commit {name}, {where}", value, "ms", detail=f"{len(values):,} one-row commits{compared}")
        )
    return rows


def on_one_server(settings: Settings) -> tuple[list[Row], list[float]]:
    """Commit latency on the running default system's one server."""
    _say(f"commit latency: {COMMITS:,} one-row commits on one server")
    values = commit_latencies(settings.admin_database_url)
    return _rows(values, "one server", None), values


def _failover_under_load(pair: Settings) -> postgres_pair.Failover:
    """One failover while orders flow at 10/s."""
    supervisor = Supervisor(pair.EO_STATE_DIR)
    bindir = postgres_cluster.find_bindir()
    assert bindir is not None
    stop, placed = threading.Event(), LoadResult()
    loader = threading.Thread(
        target=place_orders,
        kwargs={
            "url": f"http://127.0.0.1:{pair.ORDERS_API_PORT}",
            "rate": 10,
            "count": 300,
            "quiet": True,
            "stop": stop,
            "result": placed,
        },
        daemon=True,
    )
    loader.start()
    try:
        while len(placed.order_ids) < 50 and loader.is_alive():  # orders in flight before the primary dies
            time.sleep(0.1)
        return postgres_pair.failover(bindir, pair, supervisor, _say)
    finally:
        stop.set()
        loader.join(timeout=60)


def measure(one_server: list[float], earlier: Sequence[Row]) -> list[Row]:
    """On a pair of its own: commit latency synchronous and asynchronous, order latency, a failover."""
    pair = system()
    _say(f"a PostgreSQL primary and a synchronous standby: a system of its own in {pair.EO_STATE_DIR}")
    try:
        stack.up(pair, _say, with_platform=True)
        _say(f"commit latency: {COMMITS:,} one-row commits, the standby synchronous")
        rows = _rows(commit_latencies(pair.admin_database_url), "synchronous standby", one_server)
        postgres_pair.set_synchronous(pair, False)
        _say(f"commit latency: {COMMITS:,} one-row commits, the standby asynchronous")
        rows += _rows(commit_latencies(pair.admin_database_url), "asynchronous standby", one_server)
        postgres_pair.set_synchronous(pair, True)
        by_case = {(row.section, row.case): row for row in earlier}
        for row in order_latency.measure(system=pair):
            single = by_case.get((row.section, row.case))
            compared = f"; {row.value / single.value:.2f}× one server's" if single and single.value else ""
            rows.append(
                dataclasses.replace(
                    row,
                    case=f"{row.case}, synchronous standby",
                    target="",
                    met=None,
                    ratio_to_target=None,
                    detail=f"{row.detail}{compared}",
                )
            )
        _say("a failover while orders flow at 10/s")
        done = _failover_under_load(pair)
        if done.rebuilt_after_seconds is None:
            raise SystemExit(f"bench: the failover did not finish: {done.describe()}")
        mode = "synchronous standby, under 10 orders/s"
        rows += [
            Row("postgres", "failover: standby promoted", done.promoted_after_seconds, "s", detail=mode),
            Row(
                "postgres",
                "failover: old primary rebuilt",
                done.rebuilt_after_seconds,
                "s",
                detail=f"{mode}; a fresh base backup, streaming again",
            ),
        ]
    finally:
        stack.down(pair, _say)
    return rows
