from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from hypothesis import given
from hypothesis import strategies as st
from psycopg.conninfo import conninfo_to_dict
from pydantic import ValidationError

from infra.launcher.kafka_broker import new_cluster_id
from services.settings import Settings, database_hosts, over_tcp, redact, with_credentials, with_database
from services.topology import database


def test_with_credentials_replaces_user_password_and_database_and_keeps_the_rest() -> None:
    url = with_credentials(
        "postgresql://admin:pw@db.example:5433/postgres?sslmode=require",
        "orders_svc",
        "p@ss:w/rd%",
        "orders",
    )
    assert url == "postgresql://orders_svc:p%40ss%3Aw%2Frd%25@db.example:5433/orders?sslmode=require"


HOSTS = st.lists(
    st.tuples(
        st.one_of(
            st.from_regex(r"[a-z][a-z0-9-]{0,20}(\.[a-z][a-z0-9-]{0,10}){0,2}", fullmatch=True),
            st.ip_addresses(v=4).map(str),
            st.ip_addresses(v=6).map(lambda address: f"[{address}]"),
        ),
        st.one_of(st.none(), st.integers(1, 65535)),
    ),
    min_size=1,
    max_size=4,
)


TEXT = st.characters(exclude_characters="\x00", exclude_categories=["Cs"])
"""What a libpq value may hold: anything but NUL."""


@given(
    HOSTS,
    st.text(TEXT, min_size=1, max_size=20),
    st.text(TEXT, max_size=20),
    st.text(TEXT, min_size=1, max_size=20),
    st.sampled_from(["", "?target_session_attrs=read-write", "?sslmode=require&target_session_attrs=read-write"]),
)
def test_with_credentials_keeps_every_host_and_port_of_a_multi_host_url(
    hosts: list[tuple[str, int | None]], user: str, password: str, dbname: str, query: str
) -> None:
    """A POSTGRES=ha URL names both nodes: every service's URL must keep both, in order, or a
    process would stop following the primary after a failover."""
    listed = ",".join(host if port is None else f"{host}:{port}" for host, port in hosts)
    url = with_credentials(f"postgresql://admin:secret@{listed}/postgres{query}", user, password, dbname)
    expected = [(host.strip("[]"), 5432 if port is None else port) for host, port in hosts]
    assert database_hosts(url) == expected
    parsed = psycopg.conninfo.conninfo_to_dict(url)
    assert (parsed["user"], parsed.get("password", ""), parsed["dbname"]) == (user, password, dbname)
    assert str(parsed["host"]).split(",") == [host.strip("[]") for host, _ in hosts]
    assert url.endswith(query)


def test_the_pair_is_reached_through_both_nodes_and_only_a_read_write_one() -> None:
    settings = Settings(
        DATABASE_URL=None, POSTGRES="ha", POSTGRES_PORT=6000, POSTGRES_PASSWORD="pw", EO_STATE_DIR=Path("/s")
    )
    assert settings.postgres_node_ports == [6000, 6001]
    assert settings.admin_database_url == (
        "postgresql://postgres:pw@127.0.0.1:6000,127.0.0.1:6001/postgres"
        "?host=/s/postgres/run,/s/postgres/run&target_session_attrs=read-write"
    )
    assert settings.service_database_url(database("orders")) == (
        f"postgresql://orders_svc:{settings.ORDERS_DB_PASSWORD}@127.0.0.1:6000,127.0.0.1:6001/orders"
        "?host=/s/postgres/run,/s/postgres/run&target_session_attrs=read-write"
    )
    parameters = conninfo_to_dict(settings.admin_database_url)
    assert (parameters["host"], parameters["port"]) == ("/s/postgres/run,/s/postgres/run", "6000,6001")


def test_the_pair_refuses_the_relay_that_reads_logical_slots_and_the_one_host_consumers() -> None:
    with pytest.raises(ValidationError, match="RELAY=builtin"):
        Settings(POSTGRES="ha", RELAY="debezium")
    for implementation in ("java", "node"):
        with pytest.raises(ValidationError, match="INVENTORY_IMPL=python"):
            Settings(POSTGRES="ha", INVENTORY_IMPL=implementation)


def test_redact_hides_only_the_password() -> None:
    assert redact("postgresql://u:secret@h:1/d") == "postgresql://u:***@h:1/d"
    assert redact("postgresql://h:1/d") == "postgresql://h:1/d"


def test_each_service_gets_its_own_role_and_database_on_the_admin_server() -> None:
    settings = Settings(DATABASE_URL="postgresql://postgres:x@10.0.0.5:5432/postgres", ORDERS_DB_PASSWORD="o")
    assert settings.service_database_url(database("orders")) == ("postgresql://orders_svc:o@10.0.0.5:5432/orders")


def test_without_database_url_the_launcher_runs_its_own_cluster() -> None:
    settings = Settings(DATABASE_URL=None, POSTGRES_PORT=6000, POSTGRES_PASSWORD="pw", EO_STATE_DIR=Path("/s t"))
    assert settings.uses_own_postgres
    assert settings.admin_database_url == "postgresql://postgres:pw@127.0.0.1:6000/postgres?host=/s%20t/postgres/run"


def test_its_own_cluster_is_reached_through_its_unix_socket_and_the_tcp_address_stays_named() -> None:
    """libpq connects through the socket the `host` query names (on the URL's port); what needs
    a network address (a JDBC URL, the CDC connector) still reads it from the URL."""
    settings = Settings(DATABASE_URL=None, POSTGRES_PORT=6000, POSTGRES_PASSWORD="pw", EO_STATE_DIR=Path("/state"))
    for url in (settings.admin_database_url, settings.service_database_url(database("orders"))):
        parameters = conninfo_to_dict(url)
        assert (parameters["host"], parameters["port"]) == (str(settings.postgres_socket_dir), "6000")
        assert database_hosts(url) == [("127.0.0.1", 6000)]


def test_a_server_not_run_by_the_launcher_is_reached_as_its_url_says() -> None:
    url = "postgresql://postgres:x@10.0.0.5:5432/postgres"
    assert Settings(DATABASE_URL=url).admin_database_url == url


def test_production_refuses_the_development_passwords() -> None:
    with pytest.raises(ValidationError, match="ORDERS_DB_PASSWORD"):
        Settings(EO_ENV="production")


def test_production_accepts_real_passwords() -> None:
    passwords = {name: "long-random-secret" for name in Settings.model_fields if name.endswith("PASSWORD")}
    assert Settings.model_validate({"EO_ENV": "production", **passwords}).EO_ENV == "production"


def test_no_default_port_is_one_an_outgoing_connection_could_be_holding() -> None:
    """A listening port inside the ephemeral range can be taken by any client socket's local end
    (a Kafka or PostgreSQL connection of another process), and `make up` would find it in use."""
    try:
        low, high = map(int, Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    except OSError:
        low, high = 32768, 60999
    defaults = Settings(DATABASE_URL=None, KAFKA_BOOTSTRAP_SERVERS=None)
    ports = {name: value for name, value in defaults.model_dump().items() if name.endswith("_PORT")}
    ports["CONTROL_PORT_BASE + 8"] = defaults.CONTROL_PORT_BASE + 8
    assert ports and all(not low <= port <= high for port in ports.values()), ports


def test_a_kraft_cluster_id_never_begins_with_a_dash() -> None:
    """kafka-storage took an id beginning with "-" for an option and refused to format."""
    draws = iter([b"\xfb" + bytes(15), b"\xf8" + bytes(15), bytes(16)])  # "-w…", "-A…", then "AAAA…"
    cluster_id = new_cluster_id(lambda: next(draws))
    assert cluster_id == "AAAAAAAAAAAAAAAAAAAAAA"
    assert all(not new_cluster_id().startswith("-") for _ in range(2000))


def test_another_database_keeps_the_users_hosts_and_query() -> None:
    url = "postgresql://u:p@127.0.0.1:6000,127.0.0.1:6001/postgres?host=/s/run,/s/run&target_session_attrs=read-write"
    assert with_database(url, "orders") == (
        "postgresql://u:p@127.0.0.1:6000,127.0.0.1:6001/orders?host=/s/run,/s/run&target_session_attrs=read-write"
    )


def test_over_tcp_drops_only_the_socket_directory() -> None:
    settings = Settings(DATABASE_URL=None, POSTGRES="ha", POSTGRES_PORT=6000, POSTGRES_PASSWORD="pw")
    tcp = over_tcp(settings.admin_database_url)
    assert tcp == "postgresql://postgres:pw@127.0.0.1:6000,127.0.0.1:6001/postgres?target_session_attrs=read-write"
    parameters = conninfo_to_dict(tcp)
    assert (parameters["host"], parameters["port"]) == ("127.0.0.1,127.0.0.1", "6000,6001")
    assert over_tcp("postgresql://u:p@h:1/db") == "postgresql://u:p@h:1/db"
