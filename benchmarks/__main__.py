"""`make bench`: every benchmark in one run, one table with targets, JSON and a PNG chart.

Ratios (Kafka to SQL-only, batched to one at a time, duplicate to applied, purge to consume) come
from this one run: on these noisy machines, absolute figures move ±25% from one run to the next.
"""

from __future__ import annotations

import logging

from benchmarks import (
    consumer_throughput,
    implementations,
    marker_purge,
    member_restart,
    order_counts,
    order_latency,
    outbox_growth,
    panel_pages,
    postgres_pair,
    relay_bakeoff,
    relay_throughput,
    report,
    share_groups,
    sustainable_rate,
    table_growth,
    three_brokers,
)
from benchmarks.rows import Row, draw_png, table, write_json
from infra.launcher import stack
from infra.launcher.supervisor import Supervisor
from services.settings import PROJECT_ROOT, Settings


def main() -> int:
    logging.basicConfig(level=logging.WARNING)
    print(
        "make bench: consumer (three stacks), both relays, purge and saga figures (one and three Kafka nodes), "
        "and a PostgreSQL standby beside one server"
    )
    default = Settings()
    started_here = not Supervisor(default.EO_STATE_DIR).is_running()
    rows: list[Row] = consumer_throughput.measure(10_000, 50_000)
    rows += implementations.measure(3_000)
    print("  · share groups: the projection with 2, 3 and 6 members, consumer group and share group", flush=True)
    rows += share_groups.measure(5_000)
    print("  · a static member's crash and restart under each group protocol", flush=True)
    rows += member_restart.measure()
    rows += relay_throughput.measure(50_000, 1_000, 10)
    print("  · relay bake-off: the built-in relay and Debezium on the same outbox", flush=True)
    bakeoff, relays = relay_bakeoff.measure()
    rows += bakeoff
    print(f"  · chart: {relay_bakeoff.draw(relays).relative_to(PROJECT_ROOT)}", flush=True)
    correct = next(row.value for row in rows if row.case == "correct")
    url = consumer_throughput.database_url(Settings(DATABASE_URL=None, KAFKA_BOOTSTRAP_SERVERS=None))
    print("  · marker purge: 200,000 expired markers of untimed ids, row by row", flush=True)
    rows.append(marker_purge.row(marker_purge.measure(url), correct, 200_000))
    print("  · table growth: 10 k, 1 M and 10 M markers (three marker designs), 1 M and 10 M outbox rows", flush=True)
    markers = table_growth.measure(url, (10_000, 1_000_000, 10_000_000), lambda m: print(f"    {m}", flush=True))
    outbox = outbox_growth.measure(url, (1_000_000, 10_000_000), lambda m: print(f"    {m}", flush=True))
    rows += table_growth.rows(markers) + outbox_growth.rows(outbox)
    growth = ["", *table_growth.describe(markers), "", *outbox_growth.describe(outbox)]
    rows += order_latency.measure()
    one_server_commits, one_server = postgres_pair.on_one_server(default)
    rows += one_server_commits
    print("  · the panel's pages with 10,000 orders in the system", flush=True)
    rows += panel_pages.measure()
    print("  · what an order costs each process: CPU, transactions, statements, Kafka requests", flush=True)
    rows += order_counts.rows(order_counts.measure(Settings(), say=lambda message: print(f"    {message}", flush=True)))
    window = Settings().BENCH_SUSTAIN_WINDOW
    print(f"  · the saga's sustainable rate: probes of {window:g} s, three configurations", flush=True)
    sustained = sustainable_rate.measure_all(window)
    rows += sustainable_rate.rows(sustained)
    print(f"  · chart: {sustainable_rate.draw(sustained).relative_to(PROJECT_ROOT)}", flush=True)
    one_node = [row for row in rows if row.section in ("relay", "saga")]
    if started_here:  # each topology measured alone on the machine
        stack.down(default, lambda message: print(f"  · {message}", flush=True))
    else:
        print("  · the system `make up` runs stays up beside the three-node one: both share the machine", flush=True)
    rows += three_brokers.measure(one_node, 50_000, 1_000, 10)
    rows += postgres_pair.measure(one_server, rows)
    print("\n".join(["", *table(rows), *growth]))
    facts = report.run_facts()
    json_path, png_path = write_json(rows, facts=facts), draw_png(rows)
    pages = report.write(rows, facts)
    written = [json_path, png_path, *pages]
    print("\nwritten to " + ", ".join(str(path.relative_to(PROJECT_ROOT)) for path in written))
    missed = [row.case for row in rows if row.met is False]
    print("every target met" if not missed else f"targets not met in this run: {', '.join(missed)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
