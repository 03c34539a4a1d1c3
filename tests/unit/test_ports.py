"""Ports handed out for servers that bind them later: free, never excluded, never twice."""

from __future__ import annotations

import socket
from concurrent.futures import ThreadPoolExecutor

from effectively_once.contract.ports import HIGH, LOW, free_port, port_is_free


def test_ports_handed_out_from_many_threads_are_all_different_and_never_excluded() -> None:
    excluded = set(range(LOW, LOW + (HIGH - LOW) // 2))
    with ThreadPoolExecutor(8) as pool:
        ports = list(pool.map(lambda _: free_port(excluding=excluded), range(400)))
    assert len(set(ports)) == len(ports)
    assert not excluded & set(ports)
    assert all(LOW <= port <= HIGH for port in ports)


def test_a_port_someone_listens_on_is_not_free() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        assert not port_is_free(server.getsockname()[1])
