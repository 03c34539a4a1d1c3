from __future__ import annotations

import socket

import pytest

from infra.launcher.errors import LaunchError
from infra.launcher.preflight import port_is_free, require_free_port, require_java


def test_a_listening_port_is_not_free_and_is_reported_with_its_setting() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        assert not port_is_free("127.0.0.1", port)
        with pytest.raises(LaunchError, match=f"port {port}") as raised:
            require_free_port("127.0.0.1", port, "kafka", "KAFKA_PORT")
        assert "KAFKA_PORT" in raised.value.fix
    assert port_is_free("127.0.0.1", port)


def test_a_java_home_without_java_is_refused_with_how_to_install() -> None:
    with pytest.raises(LaunchError, match="Java was not found") as raised:
        require_java("/nonexistent/jdk")
    assert "openjdk-17" in raised.value.fix
