"""Loopback ports for processes a test starts."""

from __future__ import annotations

from collections.abc import Collection, Iterable

from effectively_once.contract import ports
from effectively_once.contract.ports import port_is_free

RESERVED = range(25400, 25500), range(29000, 29200)
"""Around the platform's default PostgreSQL and Kafka ports, which `make up` needs free."""
RESERVED_PORTS = {port for block in RESERVED for port in block}


def free_port(excluding: Collection[int] = ()) -> int:
    """A free loopback port outside the ephemeral range, the platform's defaults and `excluding`
    (ports already handed out for servers that have not bound them yet)."""
    return ports.free_port(excluding={*RESERVED_PORTS, *excluding})


def free_ports(names: Iterable[str], ranges: dict[str, int]) -> dict[str, int]:
    """A port for each of `names`, and for each `range_name: size` of `ranges` the first of `size`
    consecutive ports, none of them overlapping: the servers bind them later, so a port picked for
    one must not be picked again for another (a single port inside a range would be taken twice)."""
    taken: set[int] = set()
    picked: dict[str, int] = {}
    for range_name, size in ranges.items():
        base = free_port_range(size, excluding=taken)
        taken |= set(range(base, base + size))
        picked[range_name] = base
    for name in names:
        picked[name] = free_port(excluding=taken)
        taken.add(picked[name])
    return picked


def free_port_range(count: int, excluding: Collection[int] = ()) -> int:
    """The first of `count` consecutive loopback ports that are free right now, none of `excluding`."""
    for _ in range(100):
        base = free_port(excluding)
        block = set(range(base, base + count))
        if (
            base + count <= ports.HIGH
            and not (RESERVED_PORTS | set(excluding)) & block
            and all(port_is_free(base + offset) for offset in range(1, count))
        ):
            return base
    raise RuntimeError(f"no {count} consecutive free ports found")
