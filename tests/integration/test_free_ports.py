"""The ports a test system is given never overlap: its single ports (PostgreSQL, Kafka, the
panel…) are picked before any of them is bound, so a pick must not land inside the control-port
range picked for the same system (a CI run failed on a consumer whose control port another of the
system's servers had taken)."""

from __future__ import annotations

from tests.support.network import free_ports

NAMES = ("POSTGRES_PORT", "KAFKA_PORT", "KAFKA_CONTROLLER_PORT", "CHAOS_PANEL_PORT", "MAIL_PORT", "PROMETHEUS_PORT")


def test_single_ports_are_distinct_and_never_inside_the_range() -> None:
    for _ in range(300):
        ports = free_ports(NAMES, "CONTROL_PORT_BASE", 60)
        base = ports.pop("CONTROL_PORT_BASE")
        singles = list(ports.values())
        assert len(set(singles)) == len(singles), ports
        assert not [port for port in singles if base <= port < base + 60], (base, ports)
