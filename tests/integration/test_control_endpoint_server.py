"""The control endpoint's server: one slow client does not block it, and a process's settings
open it where they say, for the Host names they allow."""

from __future__ import annotations

import socket

import httpx

from effectively_once.control_endpoint import serve_control
from effectively_once.faults import FaultPoints
from effectively_once.process import ProcessSettings, serve, start
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


def test_a_process_serves_its_control_endpoint_where_its_settings_say_for_the_hosts_they_allow() -> None:
    port = free_port()
    settings = ProcessSettings(CONTROL_PORT=port, ALLOWED_HOSTS="panel.example.org", TELEMETRY_TOPIC="")
    server = serve(start(settings, "control-test"), settings, points=("before_commit",))
    assert server is not None
    try:
        url = f"http://127.0.0.1:{port}/faults"
        assert httpx.get(url, timeout=5).status_code == 200
        assert httpx.get(url, headers={"Host": "panel.example.org"}, timeout=5).status_code == 200
        assert httpx.get(url, headers={"Host": "elsewhere.example.org"}, timeout=5).status_code == 400
    finally:
        server.shutdown()
    assert serve(start(settings, "control-test"), ProcessSettings(TELEMETRY_TOPIC="")) is None
