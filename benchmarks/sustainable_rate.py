"""The saga's sustainable rate: the highest orders/s at which the pending work (orders not yet
final, unpublished outbox rows) stays flat for a whole window; then p50/p99 POST → CONFIRMED at
80 % of that rate, and each process's CPU per order.

The rate is searched from outside, on the system `make up` runs with the given settings: it
doubles from 10/s until the pending work grows, then halves the gap twice. "Flat": the
least-squares slope of the pending work over the window, after its first 10 s, is under
max(1, 3 % of the rate) per second. Between probes the system drains. The load comes from several
client threads, so the load generator is not what limits the rate (a probe that could not place
its orders at the asked rate says so).

Run alone: `python -m benchmarks.sustainable_rate [--window 60] [--only REPLICAS=1]`.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from benchmarks.order_latency import confirmation_latencies
from benchmarks.process_cpu import supervised_cpu_seconds
from benchmarks.rows import RESULTS, Row, save_figure
from infra.launcher import stack
from services.operator import act_as_operator
from services.orders.load import LoadResult, place_orders
from services.settings import Settings
from services.topology import DATABASES, database
from soak.consumer_lag import unconsumed

FINAL = ("CONFIRMED", "REJECTED", "CANCELLED")
CLIENTS = 8
TICK = 2.0


@dataclass(frozen=True)
class Sample:
    at: float
    in_flight: int
    outbox: int
    lag: int

    @property
    def pending(self) -> int:
        """Orders not yet final and rows not yet published. The groups' lag is read too (a probe
        ends only once it is back to nothing), but not counted here: offsets are committed once a
        second, so it saws up and down by a second's events and would hide the trend."""
        return self.in_flight + self.outbox


@dataclass
class Probe:
    rate: float
    placed_rate: float
    samples: list[Sample]
    slope: float
    flat: bool
    cpu_per_order_ms: dict[str, float] = field(default_factory=dict)


def _say(message: str) -> None:
    print(f"  · {message}", flush=True)


class System:
    """What the probes read: the orders and outboxes from the databases, the lag from Kafka, the
    processes' CPU from /proc."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.api = f"http://127.0.0.1:{settings.ORDERS_API_PORT}"
        self._orders = settings.auditor_database_url(database("orders"))
        self._outboxes = [settings.auditor_database_url(db) for db in DATABASES if db.runs_consumer_runtime]

    def sample(self) -> Sample:
        with psycopg.connect(self._orders, autocommit=True) as connection:
            row = connection.execute(
                "SELECT count(*) FROM customer_order WHERE status <> ALL(%s)", (list(FINAL),)
            ).fetchone()
        outbox = 0
        for url in self._outboxes:
            with psycopg.connect(url, autocommit=True) as connection:
                counted = connection.execute("SELECT count(*) FROM outbox WHERE published_at IS NULL").fetchone()
                outbox += int(counted[0]) if counted else 0
        return Sample(
            time.monotonic(), int(row[0]) if row else 0, outbox, unconsumed(self.settings.kafka_bootstrap_servers)
        )

    def cpu_seconds(self) -> dict[str, float]:
        """Each supervised process's user + system CPU so far, its descendants' included."""
        return supervised_cpu_seconds(self.settings.EO_STATE_DIR)

    def drain(self, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            sample = self.sample()
            if sample.in_flight <= 2 and sample.outbox == 0 and 0 <= sample.lag <= 5:
                return
            time.sleep(TICK)  # polling the system's state, not pacing a result
        _say(f"still draining after {timeout:.0f} s: {self.sample()}")


def slope(samples: list[Sample]) -> float:
    """Least-squares slope of the pending work, per second."""
    if len(samples) < 2:
        return 0.0
    xs = [s.at for s in samples]
    ys = [float(s.pending) for s in samples]
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    return sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread if spread else 0.0


def concurrent_load(api: str, rate: float, seconds: float, stop: threading.Event) -> LoadResult:
    """`rate` orders/s for `seconds`, from CLIENTS threads side by side."""
    result = LoadResult()
    per_client = rate / CLIENTS
    threads = [
        threading.Thread(
            target=place_orders,
            args=(api, per_client, max(1, round(per_client * seconds))),
            kwargs={"seed": 100 + n, "quiet": True, "stop": stop, "result": result},
        )
        for n in range(CLIENTS)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return result


def probe(system: System, rate: float, window: float) -> Probe:
    stop = threading.Event()
    samples: list[Sample] = []
    cpu_before = system.cpu_seconds()
    started = time.monotonic()
    placed: list[LoadResult] = []
    loader = threading.Thread(target=lambda: placed.append(concurrent_load(system.api, rate, window, stop)))
    loader.start()
    while loader.is_alive():
        samples.append(system.sample())
        loader.join(TICK)
    elapsed = time.monotonic() - started
    cpu_after = system.cpu_seconds()
    orders = len(placed[0].order_ids) if placed else 0
    steady = [s for s in samples if s.at - started >= 10]
    rise = slope(steady)
    result = Probe(
        rate,
        orders / elapsed,
        samples,
        rise,
        rise <= max(1.0, 0.03 * rate),
        {name: (cpu_after[name] - cpu_before.get(name, 0.0)) / max(orders, 1) * 1000 for name in cpu_after},
    )
    verdict = "flat" if result.flat else "grows"
    _say(
        f"{rate:g}/s asked, {result.placed_rate:.1f}/s placed: pending work {verdict} "
        f"({rise:+.2f}/s; last {samples[-1].pending if samples else 0})"
    )
    system.drain()
    return result


def search(system: System, window: float, start: float = 10, most: float = 640) -> tuple[float, list[Probe]]:
    """The highest flat rate found, and every probe."""
    probes: list[Probe] = []
    flat, rate = 0.0, start
    while rate <= most:
        result = probe(system, rate, window)
        probes.append(result)
        if not result.flat or result.placed_rate < 0.9 * rate:
            break
        flat, rate = rate, rate * 2
    low, high = flat, rate
    for _ in range(2):
        if high - low < 4:
            break
        middle = round((low + high) / 2)
        result = probe(system, middle, window)
        probes.append(result)
        low, high = (middle, high) if result.flat else (low, middle)
    return low, probes


def latency(system: System, rate: float, seconds: float = 30) -> tuple[float, float, int]:
    """p50 and p99 POST → CONFIRMED (ms) of the orders placed at `rate` for `seconds`."""
    placed = concurrent_load(system.api, rate, seconds, threading.Event())
    system.drain()
    values = confirmation_latencies(system.settings, placed.order_ids)
    if len(values) < 10:
        return float("nan"), float("nan"), len(values)
    return statistics.median(values), statistics.quantiles(values, n=100)[98], len(values)


@dataclass(frozen=True)
class Result:
    label: str
    sustainable: float
    p50_ms: float
    p99_ms: float
    confirmed: int
    probes: list[Probe]

    def busiest(self, top: int = 5) -> list[tuple[str, float]]:
        """CPU milliseconds per order, by process, at the highest flat probe."""
        flat = [p for p in self.probes if p.flat] or self.probes
        at = max(flat, key=lambda p: p.rate)
        return sorted(at.cpu_per_order_ms.items(), key=lambda item: -item[1])[:top]


def measure(label: str, settings: Settings, window: float, say: Callable[[str], None] = _say) -> Result:
    stack.up(settings, say, with_platform=True)
    act_as_operator(settings)
    system = System(settings)
    say(f"{label}: warming up")
    concurrent_load(system.api, 5, 4, threading.Event())
    system.drain()
    sustainable, probes = search(system, window)
    say(f"{label}: sustainable {sustainable:g} orders/s; latency at 80 % of it")
    p50, p99, confirmed = latency(system, max(1.0, 0.8 * sustainable)) if sustainable else (float("nan"),) * 2 + (0,)
    return Result(label, sustainable, p50, p99, confirmed, probes)


def rows(results: list[Result]) -> list[Row]:
    out = []
    for result in results:
        busiest = ", ".join(f"{name} {ms:.1f}" for name, ms in result.busiest(3))
        if result.label == "REPLICAS=1":
            toward = result.sustainable / 100
            out.append(
                Row(
                    "saga",
                    "sustainable rate, REPLICAS=1",
                    result.sustainable,
                    "orders/s",
                    "≥ 100/s",
                    toward >= 1,
                    f"CPU ms/order: {busiest}",
                    toward,
                )
            )
            p99 = result.p99_ms
            out.append(
                Row(
                    "saga",
                    "p99 at 80 % of it",
                    p99,
                    "ms",
                    "≤ 500 ms",
                    p99 <= 500,
                    f"p50 {result.p50_ms:.0f} ms, {result.confirmed} confirmed",
                    500 / p99 if p99 == p99 else None,
                )
            )
        else:
            out.append(
                Row(
                    "saga",
                    f"sustainable rate, {result.label}",
                    result.sustainable,
                    "orders/s",
                    detail=f"p50/p99 {result.p50_ms:.0f}/{result.p99_ms:.0f} ms at 80 %; CPU ms/order: {busiest}",
                )
            )
    return out


def draw(results: list[Result], path: Path = RESULTS / "sustainable.png") -> Path:
    """Pending work over each probe's window, one panel per configuration."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 3.6), squeeze=False)
    for axis, result in zip(axes[0], results, strict=True):
        for p in result.probes:
            if not p.samples:
                continue
            start = p.samples[0].at
            axis.plot(
                [s.at - start for s in p.samples],
                [s.pending for s in p.samples],
                label=f"{p.rate:g}/s {'flat' if p.flat else 'grows'}",
                linestyle="-" if p.flat else "--",
            )
        axis.set_title(f"{result.label}: sustainable {result.sustainable:g}/s")
        axis.set_xlabel("seconds into the probe")
        axis.set_ylabel("orders not final + rows not published")
        axis.legend(fontsize=7)
    return save_figure(figure, path, dpi=100)


CONFIGURATIONS: tuple[tuple[str, dict[str, int]], ...] = (
    ("REPLICAS=1", {}),
    ("REPLICAS=3", {"REPLICAS": 3}),
    ("REPLICAS=1, WORKERS=4", {"CONSUMER_WORKERS": 4}),
)


def measure_all(window: float, only: tuple[str, ...] = ()) -> list[Result]:
    results = []
    for label, overrides in CONFIGURATIONS:
        if only and label not in only:
            continue
        results.append(measure(label, Settings().model_copy(update=overrides), window))
    stack.up(Settings(), _say, with_platform=True)  # back to the default system
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--window", type=float, default=60, help="seconds each probe must stay flat")
    parser.add_argument("--only", action="append", default=[], help="a configuration's label (repeatable)")
    arguments = parser.parse_args(argv)
    results = measure_all(arguments.window, tuple(arguments.only))
    for row in rows(results):
        print(row)
    for result in results:
        print(result.label, "busiest:", result.busiest())
    print(f"chart: {draw(results)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
