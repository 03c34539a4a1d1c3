"""The ports a test system is given never overlap: its single ports (PostgreSQL, Kafka, the
panel…) are picked before any of them is bound, so a pick must not land inside the control-port
range picked for the same system (a CI run failed on a consumer whose control port another of the
system's servers had taken)."""

from __future__ import annotations

from workbench.network import free_ports

NAMES = ("POSTGRES_PORT", "CHAOS_PANEL_PORT", "MAIL_PORT", "PROMETHEUS_PORT")
RANGES = {"CONTROL_PORT_BASE": 60, "KAFKA_PORT": 6}


def test_single_ports_are_distinct_and_never_inside_a_range_nor_ranges_inside_each_other() -> None:
    for _ in range(300):
        ports = free_ports(NAMES, RANGES)
        every = [port for name in NAMES for port in [ports[name]]]
        every += [ports[name] + offset for name, size in RANGES.items() for offset in range(size)]
        assert len(set(every)) == len(every), ports
