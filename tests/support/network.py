"""Loopback ports for processes a test starts."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A loopback TCP port that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def free_port_range(count: int) -> int:
    """The first of `count` consecutive loopback ports that are free right now."""
    for _ in range(100):
        base = free_port()
        if base + count < 65535 and all(port_is_free(base + offset) for offset in range(1, count)):
            return base
    raise RuntimeError(f"no {count} consecutive free ports found")


def port_is_free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
