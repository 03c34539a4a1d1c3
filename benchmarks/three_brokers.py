"""The relay and the saga on three Kafka nodes, beside one: the same cases in the same run.

A second system of its own (its own state directory and ports, `BROKERS=3`) runs the relay's
throughput and latency cases and the order latency case; each row says how it compares with the
same case on one node, measured earlier in the run. The system is taken down afterwards.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from benchmarks import order_latency, relay_throughput
from benchmarks.own_system import own_system
from benchmarks.rows import Row
from infra.launcher import stack
from services.settings import Settings

PORTS = {
    "POSTGRES_PORT": 26432,
    "KAFKA_PORT": 30092,  # nodes 30092/30093, 30094/30095, 30096/30097
    "KAFKA_CONTROLLER_PORT": 30093,
    "CHAOS_PANEL_PORT": 18080,
    "ORDERS_API_PORT": 18000,
    "PAYMENT_PROVIDER_PORT": 18001,
    "MAIL_PORT": 18002,
    "PROMETHEUS_PORT": 19090,
    "CONTROL_PORT_BASE": 19100,
}
"""Beside the default system's ports, so both can run at once."""


def _say(message: str) -> None:
    print(f"  · {message}", flush=True)


def system() -> Settings:
    """The three-node system's settings: its own state directory and ports."""
    return own_system("3-nodes", PORTS, BROKERS=3)


def beside(three: Sequence[Row], one: Sequence[Row]) -> list[Row]:
    """Each three-node row renamed, without a target, its detail saying how it compares with one node."""
    by_case = {(row.section, row.case): row for row in one}
    rows = []
    for row in three:
        single = by_case.get((row.section, row.case))
        compared = f"; {row.value / single.value:.2f}× one node's" if single and single.value else ""
        rows.append(
            dataclasses.replace(
                row,
                case=f"{row.case}, 3 nodes",
                target="",
                met=None,
                ratio_to_target=None,
                detail=f"{row.detail}{compared}",
            )
        )
    return rows


def measure(one_node: Sequence[Row], relay_rows: int, rate: int, seconds: float) -> list[Row]:
    settings = system()
    _say(f"three Kafka nodes: a system of its own in {settings.EO_STATE_DIR}")
    try:
        rows = relay_throughput.measure(relay_rows, rate, seconds, system=settings)
        rows += order_latency.measure(system=settings)
    finally:
        stack.down(settings, _say)
    return beside(rows, one_node)
