"""What one order costs each process: CPU, database transactions and statements, Kafka requests by
kind. Counted before anything is cut (issue: half the CPU per order), on the system `make up` runs.

- **CPU**: each supervised process's user + system time, its children's included (/proc).
- **Transactions and statements**: PostgreSQL logs every statement (`log_statement = all`) for the
  window, each line prefixed with its backend and its session's `application_name`, which the
  launcher sets to the process's name (PGAPPNAME). A statement is a round trip to the server
  unless the client pipelined it; a transaction ends with COMMIT or ROLLBACK, and a statement
  outside BEGIN … COMMIT is a transaction of its own (a read included).
- **Kafka requests**: every Python process counts its clients' requests by kind
  (`eo_kafka_requests_total`, effectively_once/kafka_requests.py) once the system runs with
  KAFKA_STATISTICS_INTERVAL_MS; read from each process's /metrics before and after.

Everything a process does over the window counts, its idle polling too, divided by the orders
placed in it. Run alone: `python -m benchmarks.order_counts [--orders 300] [--rate 20]`.
"""

from __future__ import annotations

import argparse
import re
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psycopg
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.rows import Row
from benchmarks.sustainable_rate import System, concurrent_load
from infra.launcher import stack
from infra.launcher.processes import control_urls
from services.operator import act_as_operator
from services.settings import Settings

STATISTICS_INTERVAL_MS = 1000
LINE_PREFIX = "eo|%p|%a| "
"""log_line_prefix for the window: the backend's pid and its application_name, then the message."""
Requests = dict[str, Counter[str]]
"""Process -> its Kafka requests by kind."""
LOGGED = re.compile(r"^eo\|(\d+)\|([^|]*)\| LOG:  (?:statement|execute [^:]*): (.*)$")


@dataclass
class Statements:
    """One process's statements and transactions, as the server logged them."""

    statements: int = 0
    transactions: int = 0


def count_statements(lines: Iterable[str]) -> dict[str, Statements]:
    """Statements and transactions per application_name from a PostgreSQL log written with
    LINE_PREFIX and log_statement = all. Other lines (a statement's continuation, other messages)
    are skipped."""
    counted: dict[str, Statements] = defaultdict(Statements)
    open_transaction: dict[str, bool] = {}
    for line in lines:
        logged = LOGGED.match(line)
        if not logged:
            continue
        backend, application, sql = logged.groups()
        words = sql.strip().split(None, 1)
        first = words[0].upper().rstrip(";") if words else ""
        these = counted[application or "(unnamed)"]
        these.statements += 1
        if first in ("BEGIN", "START"):
            open_transaction[backend] = True
        elif first in ("COMMIT", "END", "ROLLBACK", "ABORT"):
            these.transactions += 1
            open_transaction[backend] = False
        elif not open_transaction.get(backend, False):
            these.transactions += 1
    return dict(counted)


def _read_from(log: Path, start: int, inode: int) -> list[str]:
    """The lines written to `log` from byte `start` of the file that was `inode` on, across the
    supervisor's rotations (it moves a full log to `<log>.1`, that one to `<log>.2`...)."""
    parts = [log]
    while parts[-1].exists() and parts[-1].stat().st_ino != inode:
        parts.append(log.with_name(f"{log.name}.{len(parts)}"))
    if not parts[-1].exists():
        raise RuntimeError(f"{log} was rotated more often than its backups keep: count fewer orders")
    text = b""
    for n, part in enumerate(reversed(parts)):
        with part.open("rb") as file:
            file.seek(start if n == 0 else 0)
            text += file.read()
    return text.decode(errors="replace").splitlines()


@contextmanager
def statement_log(admin_url: str, log: Path) -> Iterator[Callable[[], list[str]]]:
    """Every statement logged while inside; yields a function that reads what was logged since
    entering. The server's settings are put back on the way out, whatever happened."""
    with psycopg.connect(admin_url, autocommit=True) as connection:
        connection.execute("ALTER SYSTEM SET log_statement = 'all'")
        connection.execute(f"ALTER SYSTEM SET log_line_prefix = '{LINE_PREFIX}'")
        connection.execute("ALTER SYSTEM SET log_parameter_max_length = 0")  # no parameters: a third of the bytes
        connection.execute("SELECT pg_reload_conf()")
        log.touch()
        start, inode = log.stat().st_size, log.stat().st_ino

        def since() -> list[str]:
            return _read_from(log, start, inode)

        try:
            yield since
        finally:
            connection.execute("ALTER SYSTEM RESET log_statement")
            connection.execute("ALTER SYSTEM RESET log_line_prefix")
            connection.execute("ALTER SYSTEM RESET log_parameter_max_length")
            connection.execute("SELECT pg_reload_conf()")


def kafka_requests(urls: dict[str, str]) -> Requests:
    """Each process's eo_kafka_requests_total by kind, from its /metrics (a process away: none)."""
    found: Requests = {}
    for name, url in urls.items():
        try:
            text = httpx.get(f"{url}/metrics", timeout=10, follow_redirects=True).text  # a mounted app: /metrics/
        except httpx.HTTPError:
            continue
        kinds: Counter[str] = Counter()
        for family in text_string_to_metric_families(text):
            if family.name == "eo_kafka_requests":
                for sample in family.samples:
                    if sample.name == "eo_kafka_requests_total":
                        kinds[sample.labels["kind"]] += int(sample.value)
        found[name] = kinds
    return found


def _reported_since(urls: dict[str, str], then: Requests, timeout: float = 15) -> Requests:
    """The counts once every process that counts has reported again after `then` (its statistics
    come every STATISTICS_INTERVAL_MS, each with every request sent before it; an idle client's
    fetches still grow them)."""
    deadline = time.monotonic() + timeout
    while True:
        now = kafka_requests(urls)
        if all(now.get(name) != counted for name, counted in then.items() if counted) or time.monotonic() > deadline:
            return now
        time.sleep(STATISTICS_INTERVAL_MS / 4000)  # polling for the next report, not pacing a result


@dataclass
class ProcessCost:
    cpu_ms: float = 0.0
    transactions: float = 0.0
    statements: float = 0.0
    requests: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Counts:
    orders: int
    seconds: float
    processes: dict[str, ProcessCost]

    def total(self) -> ProcessCost:
        whole = ProcessCost()
        kinds: Counter[str] = Counter()
        for cost in self.processes.values():
            whole.cpu_ms += cost.cpu_ms
            whole.transactions += cost.transactions
            whole.statements += cost.statements
            kinds.update(cost.requests)
        whole.requests = dict(kinds)
        return whole


def _metrics_urls(settings: Settings) -> dict[str, str]:
    return {
        **control_urls(settings),
        "orders-api": f"http://127.0.0.1:{settings.ORDERS_API_PORT}",
        "chaos-panel": settings.chaos_panel_url,
    }


def measure(settings: Settings, orders: int = 300, rate: float = 20, say: Callable[[str], None] = print) -> Counts:
    """`orders` placed at `rate` on a system whose processes count their Kafka requests, with every
    statement logged; each process's costs over the window, divided by the orders placed."""
    counting = settings.model_copy(update={"KAFKA_STATISTICS_INTERVAL_MS": STATISTICS_INTERVAL_MS})
    stack.up(counting, say, with_platform=True)
    act_as_operator(counting)
    system = System(counting)
    concurrent_load(system.api, 5, 4, threading.Event())  # warm: the first orders' imports and connections
    system.drain()
    urls = _metrics_urls(counting)
    log = counting.EO_STATE_DIR / "logs" / "postgres.log"
    with statement_log(counting.admin_database_url, log) as logged:
        cpu_before, requests_before = system.cpu_seconds(), kafka_requests(urls)
        started = time.monotonic()
        placed = concurrent_load(system.api, rate, orders / rate, threading.Event())
        system.drain()
        cpu_after, requests_after = system.cpu_seconds(), _reported_since(urls, kafka_requests(urls))
        seconds = time.monotonic() - started
        statements = count_statements(logged())
    placed_orders = max(len(placed.order_ids), 1)
    costs: dict[str, ProcessCost] = {}
    for name in sorted(set(cpu_after) | set(statements) | set(requests_after)):
        grown = requests_after.get(name, Counter())
        grown.subtract(requests_before.get(name, Counter()))
        counted = statements.get(name, Statements())
        costs[name] = ProcessCost(
            cpu_ms=(cpu_after.get(name, 0.0) - cpu_before.get(name, 0.0)) / placed_orders * 1000,
            transactions=counted.transactions / placed_orders,
            statements=counted.statements / placed_orders,
            requests={kind: count / placed_orders for kind, count in grown.items() if count > 0},
        )
    return Counts(len(placed.order_ids), seconds, costs)


def _requests(requests: dict[str, float], top: int = 4) -> str:
    ordered = sorted(requests.items(), key=lambda item: -item[1])
    shown = ", ".join(f"{kind} {count:.1f}" for kind, count in ordered[:top])
    rest = sum(count for _, count in ordered[top:])
    return shown + (f", others {rest:.1f}" if rest >= 0.05 else "") if shown else "none"


def rows(counts: Counts) -> list[Row]:
    """The whole saga's cost per order, then each process's, busiest first."""
    whole = counts.total()
    out = [
        Row(
            "per order",
            "every process",
            whole.cpu_ms,
            "CPU ms",
            "≤ 20 ms (100 orders/s on 2 cores)",
            whole.cpu_ms <= 20,
            f"{whole.transactions:.1f} transactions, {whole.statements:.1f} statements; "
            f"Kafka requests {sum(whole.requests.values()):.1f}: {_requests(whole.requests, 6)}; "
            f"{counts.orders} orders in {counts.seconds:.0f} s",
            20 / whole.cpu_ms if whole.cpu_ms else None,
        )
    ]
    for name, cost in sorted(counts.processes.items(), key=lambda item: -item[1].cpu_ms):
        if cost.cpu_ms < 0.05 and not cost.statements and not cost.requests:
            continue
        out.append(
            Row(
                "per order",
                name,
                cost.cpu_ms,
                "CPU ms",
                detail=f"{cost.transactions:.1f} transactions, {cost.statements:.1f} statements; "
                f"Kafka: {_requests(cost.requests)}",
            )
        )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--orders", type=int, default=300, help="orders placed in the window")
    parser.add_argument("--rate", type=float, default=20, help="orders a second")
    arguments = parser.parse_args(argv)
    if arguments.orders <= 0 or arguments.rate <= 0:
        parser.error("orders and rate must be positive")
    default = Settings()
    try:
        counts = measure(default, arguments.orders, arguments.rate, lambda message: print(f"  · {message}", flush=True))
    finally:
        stack.up(default, lambda message: print(f"  · {message}", flush=True))  # its processes count no more
    for row in rows(counts):
        print(f"{row.case:<26}{row.value:>8.1f} {row.unit}  {row.detail}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
