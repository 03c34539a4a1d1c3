"""Loopback ports for servers a caller starts later: free now, and never handed out twice."""

from __future__ import annotations

import random
import socket
import threading
from collections.abc import Collection

LOW, HIGH = 20000, 32000
"""Below the kernel's ephemeral range (32768 and up): no outgoing connection takes one of these
ports between the moment it is picked and the moment its server binds it."""

_HANDED_OUT: set[int] = set()
_HANDING_OUT = threading.Lock()


def free_port(excluding: Collection[int] = ()) -> int:
    """A loopback port nothing holds now, not one of `excluding`, and never one this process handed
    out before: servers picked for side by side (threads, scenarios) cannot be given the same."""
    with _HANDING_OUT:
        for _ in range(1000):
            port = random.randint(LOW, HIGH)
            if port in _HANDED_OUT or port in excluding or not port_is_free(port):
                continue
            _HANDED_OUT.add(port)
            return port
    raise RuntimeError(f"no free loopback port between {LOW} and {HIGH}")


def port_is_free(port: int) -> bool:
    """True when this process could bind 127.0.0.1:port now."""
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True
