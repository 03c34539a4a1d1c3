"""BROKERS: one node or three, each node's ports and configuration derived from the settings; a running
system keeps its Kafka nodes and its RELAY until it is stopped."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from infra.launcher import kafka_broker, processes, stack
from infra.launcher.errors import LaunchError
from services.settings import Settings


def _properties(path: Path) -> dict[str, str]:
    lines = [line for line in path.read_text().splitlines() if line and not line.startswith("#")]
    return dict(line.split("=", 1) for line in lines)


@pytest.mark.parametrize("brokers", [0, 2, 4, 5])
def test_only_one_or_three_brokers_are_accepted(brokers: int) -> None:
    with pytest.raises(ValidationError, match="BROKERS is 1"):
        Settings(BROKERS=brokers)


@given(port=st.integers(20000, 30000), gap=st.integers(-6, 6))
def test_three_nodes_never_share_a_port_or_the_settings_are_refused(port: int, gap: int) -> None:
    try:
        settings = Settings(BROKERS=3, KAFKA_PORT=port, KAFKA_CONTROLLER_PORT=port + gap)
    except ValidationError as error:
        assert "overlap" in str(error)
        return
    every = [p for pair in settings.kafka_node_ports for p in pair]
    assert len(set(every)) == 6
    assert settings.kafka_bootstrap_servers.split(",") == [f"127.0.0.1:{p}" for p, _ in settings.kafka_node_ports]


def test_each_node_of_three_is_configured_as_one_replicated_quorum(tmp_path: Path) -> None:
    settings = Settings(BROKERS=3, EO_STATE_DIR=tmp_path, KAFKA_PORT=21000, KAFKA_CONTROLLER_PORT=21001)
    configs = [_properties(kafka_broker.server_properties(settings, node)) for node in (1, 2, 3)]
    assert [c["node.id"] for c in configs] == ["1", "2", "3"]
    assert {c["controller.quorum.voters"] for c in configs} == {"1@127.0.0.1:21001,2@127.0.0.1:21003,3@127.0.0.1:21005"}
    assert [c["listeners"].split(",")[0] for c in configs] == [f"BROKER://127.0.0.1:{p}" for p in (21000, 21002, 21004)]
    assert len({c["log.dirs"] for c in configs}) == 3
    for config in configs:
        assert config["default.replication.factor"] == config["offsets.topic.replication.factor"] == "3"
        assert config["min.insync.replicas"] == "2"
        assert config["unclean.leader.election.enable"] == "false"


def test_one_node_keeps_its_name_and_every_factor_is_one(tmp_path: Path) -> None:
    settings = Settings(EO_STATE_DIR=tmp_path)
    config = _properties(kafka_broker.server_properties(settings))
    assert kafka_broker.node_names(settings) == [processes.KAFKA]
    assert config["default.replication.factor"] == config["min.insync.replicas"] == "1"


def test_the_nodes_of_a_cluster_stop_one_after_another(tmp_path: Path) -> None:
    programs = processes.kafka_programs(Settings(BROKERS=3, EO_STATE_DIR=tmp_path), "java", tmp_path)
    assert [p.name for p in programs] == ["kafka-1", "kafka-2", "kafka-3"]
    assert len({p.priority for p in programs}) == 3
    assert all(p.stop_wait_seconds <= 15 for p in programs)


class _RunningSupervisor:
    def __init__(self, names: list[str]) -> None:
        self.names = names

    def is_running(self) -> bool:
        return True

    def all_info(self) -> list[dict[str, str]]:
        return [{"name": name} for name in self.names]


@pytest.mark.parametrize(
    ("running", "brokers"),
    [(["postgres", "kafka", "inventory"], 3), (["postgres", "kafka-1", "kafka-2", "kafka-3"], 1)],
)
def test_a_running_system_keeps_its_kafka_nodes_until_it_is_stopped(
    tmp_path: Path, running: list[str], brokers: int
) -> None:
    settings = Settings(BROKERS=brokers, EO_STATE_DIR=tmp_path)
    with pytest.raises(LaunchError, match="make down"):
        stack._refuse_another_kafka_topology(_RunningSupervisor(running), settings)  # type: ignore[arg-type]
    same = ["postgres", *kafka_broker.node_names(settings)]
    stack._refuse_another_kafka_topology(_RunningSupervisor(same), settings)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("running", "relay"),
    [
        (["postgres", "kafka", "outbox-relay", "kafka-connect"], "builtin"),
        (["postgres", "kafka", "outbox-relay"], "debezium"),
    ],
)
def test_a_running_system_keeps_its_relay_until_it_is_stopped(
    tmp_path: Path, running: list[str], relay: Literal["builtin", "debezium"]
) -> None:
    settings = Settings(RELAY=relay, EO_STATE_DIR=tmp_path)
    with pytest.raises(LaunchError, match="make down") as refused:
        stack._refuse_another_relay(_RunningSupervisor(running), settings)  # type: ignore[arg-type]
    assert f"not RELAY={relay}" in str(refused.value)
    other: Literal["builtin", "debezium"] = "debezium" if relay == "builtin" else "builtin"
    kept = Settings(RELAY=other, EO_STATE_DIR=tmp_path)
    stack._refuse_another_relay(_RunningSupervisor(running), kept)  # type: ignore[arg-type]
    stack._refuse_another_relay(_RunningSupervisor(["postgres", "kafka"]), settings)  # type: ignore[arg-type]
