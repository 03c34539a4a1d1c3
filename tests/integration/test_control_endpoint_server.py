"""The control endpoint's server: one slow client does not block it."""

from __future__ import annotations

import socket

import httpx

from effectively_once.control_endpoint import serve_control
from effectively_once.faults import FaultPoints
from workbench.network import free_port


def test_a_client_that_sends_half_a_request_does_not_block_the_others() -> None:
    port = free_port()
    server = serve_control(FaultPoints(), "127.0.0.1", port)
    try:
        with socket.create_connection(("127.0.0.1", port)) as slow:
            slow.sendall(b"POST /faults HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\r\n{")  # and no more
            # A server that serves one request at a time waits for the rest of the slow one: this
            # read then times out instead of answering.
            answer = httpx.get(f"http://127.0.0.1:{port}/faults", timeout=5)
            assert answer.status_code == 200
    finally:
        server.shutdown()
