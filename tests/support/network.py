"""Loopback ports for processes a test starts."""

from __future__ import annotations

import random
import socket
from collections.abc import Collection, Iterable

LOW, HIGH = 20000, 32000
"""Below the kernel's ephemeral range (32768-60999): no outgoing connection takes one of these
ports between the moment a test picks it and the moment its server binds it."""


RESERVED = range(25400, 25500), range(29000, 29200)
"""Around the platform's default PostgreSQL and Kafka ports, which `make up` needs free."""
RESERVED_PORTS = {port for block in RESERVED for port in block}


def free_port(excluding: Collection[int] = ()) -> int:
    """A loopback TCP port that nothing holds right now, outside the ephemeral range, and not one
    of `excluding` (ports already handed out for servers that have not bound them yet)."""
    for _ in range(1000):
        port = random.randint(LOW, HIGH)
        if port not in RESERVED_PORTS and port not in excluding and port_is_free(port):
            return port
    raise RuntimeError(f"no free port between {LOW} and {HIGH}")


def free_ports(names: Iterable[str], range_name: str, range_size: int) -> dict[str, int]:
    """A port for each of `names`, and the first of `range_size` consecutive ports for
    `range_name`, none of them overlapping: the servers bind them later, so a port picked for one
    must not be picked again for another (a single port inside the range would be taken twice)."""
    base = free_port_range(range_size)
    taken = set(range(base, base + range_size))
    ports: dict[str, int] = {}
    for name in names:
        ports[name] = free_port(excluding=taken)
        taken.add(ports[name])
    return {**ports, range_name: base}


def free_port_range(count: int) -> int:
    """The first of `count` consecutive loopback ports that are free right now."""
    for _ in range(100):
        base = free_port()
        if (
            base + count <= HIGH
            and not RESERVED_PORTS & set(range(base, base + count))
            and all(port_is_free(base + offset) for offset in range(1, count))
        ):
            return base
    raise RuntimeError(f"no {count} consecutive free ports found")


def port_is_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
