"""Loopback ports for processes a test starts."""

from __future__ import annotations

from collections.abc import Collection, Iterable

from effectively_once.contract import ports
from effectively_once.contract.ports import HIGH, port_is_free

RESERVED = range(25400, 25500), range(29000, 29200)
"""Around the platform's default PostgreSQL and Kafka ports, which `make up` needs free."""
RESERVED_PORTS = {port for block in RESERVED for port in block}


def free_port(excluding: Collection[int] = ()) -> int:
    """A free loopback port outside the ephemeral range, the platform's defaults and `excluding`
    (ports already handed out for servers that have not bound them yet)."""
    return ports.free_port(excluding={*RESERVED_PORTS, *excluding})


def free_ports(names: Iterable[str], range_name: str, range_size: int) -> dict[str, int]:
    """A port for each of `names`, and the first of `range_size` consecutive ports for
    `range_name`, none of them overlapping: the servers bind them later, so a port picked for one
    must not be picked again for another (a single port inside the range would be taken twice)."""
    base = free_port_range(range_size)
    taken = set(range(base, base + range_size))
    picked: dict[str, int] = {}
    for name in names:
        picked[name] = free_port(excluding=taken)
        taken.add(picked[name])
    return {**picked, range_name: base}


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
