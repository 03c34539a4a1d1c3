"""REPLICAS: more instances of every consumer (the same groups) and of the relay."""

from __future__ import annotations

import sys

import pytest
from pydantic import ValidationError

from infra.launcher import processes
from services.settings import Settings


def _settings(replicas: int) -> Settings:
    return Settings(DATABASE_URL=None, KAFKA_BOOTSTRAP_SERVERS=None, REPLICAS=replicas)


def test_three_replicas_run_three_of_each_consumer_and_relay_and_one_of_each_executor() -> None:
    programs = {p.name: p for p in processes.platform_programs(_settings(3))}
    for name in ("inventory", "outbox-relay", "sales-projection"):
        assert {name, f"{name}-2", f"{name}-3"} <= set(programs)
    assert "payment-executor-2" not in programs and "notification-dispatcher-2" not in programs
    ports = [port for program in programs.values() for port in program.ports]
    assert len(ports) == len(set(ports))
    instance_ids = [p.environment["EO_INSTANCE_ID"] for p in programs.values() if "EO_INSTANCE_ID" in p.environment]
    assert len(instance_ids) == len(set(instance_ids))
    assert programs["inventory-3"].environment["EO_PROCESS_NAME"] == "inventory-3"
    assert set(processes.control_urls(_settings(3))) == {
        name for name, program in programs.items() if "CONTROL_PORT" in program.environment
    } - {processes.BROKER_CONTROL}  # the panel reaches the Kafka nodes' endpoint as BROKER_CONTROL_URL


def test_one_replica_is_the_platform_as_it_always_was() -> None:
    names = {p.name for p in processes.platform_programs(_settings(1))}
    assert "inventory" in names and not any(name.endswith("-2") for name in names)


@pytest.mark.parametrize("replicas", [0, 6])
def test_replicas_out_of_range_are_refused(replicas: int) -> None:
    with pytest.raises(ValidationError, match="REPLICAS"):
        _settings(replicas)


def test_share_groups_run_in_every_replica_of_the_projection_and_the_dispatch_and_nowhere_else() -> None:
    shared = _settings(2).model_copy(update={"SHARE_GROUPS": "on"})
    names = processes.share_group_instances(shared)
    assert sorted(names) == ["notification", "notification-2", "sales-projection", "sales-projection-2"]
    programs = {p.name: p for p in processes.platform_programs(shared)}
    assert {name for name, p in programs.items() if p.environment.get("CONSUMER_SHARE_GROUP") == "on"} == set(names)
    assert processes.share_group_instances(_settings(2)) == []


def test_every_python_process_names_its_database_sessions_after_itself() -> None:
    for program in processes.platform_programs(_settings(2)):
        if program.command[0] == sys.executable:
            assert program.environment["PGAPPNAME"] == program.name, program.name


def test_the_processes_count_their_kafka_requests_only_when_asked() -> None:
    quiet = processes.platform_programs(_settings(1))
    assert not any("KAFKA_STATISTICS_INTERVAL_MS" in program.environment for program in quiet)
    counting = processes.platform_programs(_settings(1).model_copy(update={"KAFKA_STATISTICS_INTERVAL_MS": 1000}))
    python = [program for program in counting if program.command[0] == sys.executable]
    assert python and all(program.environment["KAFKA_STATISTICS_INTERVAL_MS"] == "1000" for program in python)
