"""The PostgreSQL the launcher runs is reached through its unix socket (less CPU a round trip than
loopback TCP, at both ends), and the socket asks the same password as TCP: a faster way in is
never an open one."""

from __future__ import annotations

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from services.settings import Settings, over_tcp, with_credentials
from services.topology import database


@pytest.fixture
def socket_url(settings: Settings) -> str:
    """The tests' admin URL, which must name the socket directory when the server is at the
    address of the launcher's own; a server elsewhere (a DATABASE_URL given) is skipped."""
    url, own = settings.admin_database_url, Settings(DATABASE_URL=None)
    if over_tcp(url) != over_tcp(own.admin_database_url):
        pytest.skip("the tests' server is not the one the launcher runs")
    assert conninfo_to_dict(url).get("host") == str(own.postgres_socket_dir), url
    return url


def test_the_platforms_connections_go_through_the_socket(socket_url: str, settings: Settings) -> None:
    orders = database("orders")
    url = with_credentials(socket_url, orders.role, settings.database_password(orders), orders.name)
    with psycopg.connect(url) as connection:
        assert connection.info.host.startswith("/")
        assert connection.execute("SELECT inet_client_addr()").fetchone() == (None,)  # not over TCP


def test_the_socket_refuses_a_wrong_password_and_none(socket_url: str) -> None:
    orders = database("orders")
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(with_credentials(socket_url, orders.role, "not-its-password", orders.name)).close()
    with pytest.raises(psycopg.OperationalError, match="no password supplied"):
        psycopg.connect(with_credentials(socket_url, orders.role, "", orders.name)).close()


def test_the_server_asks_scram_on_the_socket_as_over_tcp(socket_url: str) -> None:
    with psycopg.connect(socket_url) as connection:
        rules = connection.execute(
            "SELECT type, auth_method FROM pg_hba_file_rules WHERE error IS NULL ORDER BY line_number"
        ).fetchall()
    assert rules and {method for _, method in rules} == {"scram-sha-256"}
    assert {kind for kind, _ in rules} == {"local", "host"}
