"""One Kafka principal per process, least privilege, and how a client learns which it is."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from confluent_kafka.admin import AclOperation, ResourceType  # type: ignore[attr-defined]
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from effectively_once.kafka_client import KafkaPrincipal, KafkaPrincipalError, client_config, principal_from_environment
from infra.launcher import kafka_broker, processes
from infra.launcher.kafka_principals import bindings
from services.kafka_access import ADMIN, CDC, OPERATOR, PRINCIPALS, RELAY, acl_table, principal_of
from services.settings import PROJECT_ROOT, Settings
from services.topology import CONSUMERS, EVENT_TOPICS, TELEMETRY_TOPIC, Consumer


def _granted(topic: str, operation: str) -> set[str]:
    """The principals allowed `operation` on `topic`."""
    return {
        principal.name
        for principal in PRINCIPALS
        for grant in principal.grants
        if grant.resource == "topic" and grant.name == topic and operation in grant.operations
    }


@pytest.mark.parametrize("topic", EVENT_TOPICS)
def test_only_the_relays_and_the_operator_may_write_an_event_topic(topic: str) -> None:
    assert _granted(topic, "WRITE") == {RELAY, CDC, OPERATOR}


@pytest.mark.parametrize("consumer", CONSUMERS, ids=lambda c: c.name)
def test_a_consumer_reads_exactly_its_topics_and_writes_only_its_dead_letters_and_telemetry(consumer: Consumer) -> None:
    """It reads its own dead letters too (the marker purge weighs the oldest), never another's."""
    [principal] = [p for p in PRINCIPALS if p.name == consumer.name]
    read = {g.name for g in principal.grants if g.resource == "topic" and "READ" in g.operations}
    written = {g.name for g in principal.grants if g.resource == "topic" and "WRITE" in g.operations}
    configs = {g.name for g in principal.grants if g.resource == "topic" and "DESCRIBE_CONFIGS" in g.operations}
    assert read == {*consumer.topics, consumer.dead_letter_topic}
    assert configs == set(consumer.topics)
    assert written == {consumer.dead_letter_topic, TELEMETRY_TOPIC}
    assert _granted(consumer.dead_letter_topic, "WRITE") == {consumer.name, OPERATOR}
    assert _granted(consumer.dead_letter_topic, "READ") == {consumer.name, OPERATOR}


def test_every_supervised_program_has_its_own_principal_and_replicas_share_it() -> None:
    settings = Settings(REPLICAS=3)
    named = {
        program.name: program.environment.get("KAFKA_USERNAME") for program in processes.platform_programs(settings)
    }
    named.pop(processes.PROMETHEUS)
    assert all(named.values()), [name for name, user in named.items() if not user]
    assert ADMIN not in named.values()
    assert named["inventory-3"] == named["inventory"] == "inventory-reservation-v1"
    assert named["chaos-panel"] == OPERATOR
    assert named["payment-executor"] != named["payment"]
    # Kafka Connect's worker (RELAY=debezium) is given its principal in its rendered properties.
    assert principal_of(processes.KAFKA_CONNECT) == CDC
    assert len({user for name, user in named.items() if not name[-1].isdigit()}) == len(PRINCIPALS) - 1


def test_a_program_that_is_not_the_platforms_has_no_principal() -> None:
    with pytest.raises(KeyError):
        principal_of("payment-rogue")


@given(
    name=st.sampled_from([p.name for p in PRINCIPALS] + [ADMIN]), other=st.sampled_from([p.name for p in PRINCIPALS])
)
def test_each_principal_has_its_own_password_derived_from_the_master(name: str, other: str) -> None:
    settings, again = Settings(), Settings(KAFKA_MASTER_PASSWORD="another-secret")
    assert settings.kafka_principal(name) == Settings().kafka_principal(name)
    assert settings.kafka_principal(name).password != again.kafka_principal(name).password
    if name != other:
        assert settings.kafka_principal(name).password != settings.kafka_principal(other).password


def test_production_refuses_the_development_master_password() -> None:
    with pytest.raises(ValidationError, match="KAFKA_MASTER_PASSWORD"):
        Settings(EO_ENV="production")


def test_every_grant_becomes_acls_and_the_operator_may_read_every_group() -> None:
    operator = next(p for p in PRINCIPALS if p.name == OPERATOR)
    acls = bindings(operator)
    assert any(
        acl.name == "*" and acl.operation == AclOperation.READ and acl.restype == ResourceType.GROUP for acl in acls
    )
    assert {acl.principal for p in PRINCIPALS for acl in bindings(p)} == {f"User:{p.name}" for p in PRINCIPALS}


def test_a_principal_from_the_environment_configures_sasl_and_a_half_one_is_refused() -> None:
    principal = principal_from_environment({"KAFKA_USERNAME": "relay", "KAFKA_PASSWORD": "s3cret-xyz"})
    assert principal == KafkaPrincipal("relay", "s3cret-xyz")
    assert client_config("h:1", {"acks": "all"}, principal) == {
        "bootstrap.servers": "h:1",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "relay",
        "sasl.password": "s3cret-xyz",
        "acks": "all",
    }
    assert principal_from_environment({}) is None
    assert "s3cret-xyz" not in repr(principal)
    for broken in ({"KAFKA_USERNAME": "relay"}, {"KAFKA_PASSWORD": "p"}):
        with pytest.raises(KafkaPrincipalError, match="both"):
            principal_from_environment(broken)
    with pytest.raises(KafkaPrincipalError, match="KAFKA_SASL_MECHANISM"):
        principal_from_environment({"KAFKA_USERNAME": "a", "KAFKA_PASSWORD": "b", "KAFKA_SASL_MECHANISM": "GSSAPI"})


def test_the_nodes_authenticate_and_authorize_and_keep_the_admin_password_to_themselves(tmp_path: Path) -> None:
    settings = Settings(EO_STATE_DIR=tmp_path)
    path = kafka_broker.server_properties(settings)
    config = dict(line.split("=", 1) for line in path.read_text().splitlines() if line and not line.startswith("#"))
    assert config["listener.security.protocol.map"] == "BROKER:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT"
    assert config["allow.everyone.if.no.acl.found"] == "false"
    assert config["super.users"] == f"User:{ADMIN}"
    assert settings.kafka_principal(ADMIN).password in config["listener.name.broker.scram-sha-512.sasl.jaas.config"]
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_the_docs_list_exactly_the_acls_the_launcher_grants() -> None:
    page = (PROJECT_ROOT / "docs" / "kafka-principals.md").read_text()
    listed = page.split("<!-- acl-table -->\n", 1)[1].split("<!-- /acl-table -->", 1)[0]
    assert listed == acl_table()


def test_a_set_password_wins_over_the_derived_one_and_production_refuses_a_development_one() -> None:
    settings = Settings(KAFKA_PASSWORDS={RELAY: "chosen-for-the-relay"})
    assert settings.kafka_principal(RELAY).password == "chosen-for-the-relay"
    assert settings.kafka_principal(OPERATOR) == Settings().kafka_principal(OPERATOR)
    with pytest.raises(ValidationError, match=r"KAFKA_PASSWORDS\[outbox-relay\]"):
        Settings(EO_ENV="production", KAFKA_MASTER_PASSWORD="s", KAFKA_PASSWORDS={RELAY: "relay-kafka-dev-password"})
