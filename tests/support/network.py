"""Loopback ports for processes a test starts."""

from __future__ import annotations

import socket


def free_port() -> int:
    """A loopback TCP port that nothing listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
