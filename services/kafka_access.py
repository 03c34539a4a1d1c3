"""Who may do what on Kafka: one principal per process, and the ACLs each is given.

A consumer may also read its topics' configuration and its own dead letters: its marker purge
weighs their retention and its oldest dead letter (effectively_once/redelivery_windows.py).

The broker allows nothing that is not listed here (`allow.everyone.if.no.acl.found=false`), just
as each service database role may touch only its own tables. No I/O here: the launcher turns these
grants into SCRAM users and ACLs, docs/kafka-principals.md lists them.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.topology import CDC_HEARTBEAT_PREFIX, CONSUMERS, EVENT_TOPICS, TELEMETRY_TOPIC, all_topics

ADMIN = "admin"
"""The brokers' own principal (between nodes, to the controllers) and the launcher's: a super user."""
OPERATOR = "operator"
"""The chaos panel's redelivery tools, the labs and the soak: they read every topic and write the
event topics on purpose, as an operator replaying a message would."""
RELAY = "outbox-relay"
CDC = "outbox-cdc"
"""Kafka Connect's worker under RELAY=debezium: it writes the event topics, as the relay does."""


@dataclass(frozen=True)
class Grant:
    """Operations allowed on one resource: a topic, a consumer group, or the cluster."""

    resource: str
    """"topic", "group" or "cluster"."""
    name: str
    operations: tuple[str, ...]
    prefixed: bool = False
    """True when `name` is a prefix: every group whose id begins with it."""


@dataclass(frozen=True)
class Principal:
    name: str
    grants: tuple[Grant, ...]
    programs: tuple[str, ...]
    """The supervised programs (and their replicas) that act as this principal."""


def _telemetry() -> Grant:
    return Grant("topic", TELEMETRY_TOPIC, ("WRITE", "DESCRIBE"))


def _consumer_principals() -> tuple[Principal, ...]:
    programs = {
        "orders-saga-v1": "orders-saga",
        "inventory-reservation-v1": "inventory",
        "payment-authorization-v1": "payment",
        "notification-dispatch-v1": "notification",
        "sales-projection-v1": "sales-projection",
    }
    return tuple(
        Principal(
            consumer.name,
            (
                *(Grant("topic", topic, ("READ", "DESCRIBE", "DESCRIBE_CONFIGS")) for topic in consumer.topics),
                Grant("group", consumer.name, ("READ", "DESCRIBE"), prefixed=True),
                Grant("topic", consumer.dead_letter_topic, ("WRITE", "READ", "DESCRIBE")),
                _telemetry(),
            ),
            (programs[consumer.name],),
        )
        for consumer in CONSUMERS
    )


PRINCIPALS: tuple[Principal, ...] = (
    Principal(
        RELAY, (*(Grant("topic", topic, ("WRITE", "DESCRIBE")) for topic in EVENT_TOPICS), _telemetry()), (RELAY,)
    ),
    Principal(
        CDC,
        (
            *(Grant("topic", topic, ("WRITE", "DESCRIBE")) for topic in EVENT_TOPICS),
            Grant("topic", CDC_HEARTBEAT_PREFIX, ("WRITE", "DESCRIBE"), prefixed=True),
        ),
        ("kafka-connect",),
    ),
    *_consumer_principals(),
    *(
        Principal(name, (_telemetry(),), (name,))
        for name in ("payment-executor", "notification-dispatcher", "orders-api", "payment-provider", "mail")
    ),
    Principal(
        OPERATOR,
        (
            *(Grant("topic", topic, ("READ", "WRITE", "DESCRIBE", "DESCRIBE_CONFIGS")) for topic in all_topics()),
            Grant("group", "*", ("READ", "DESCRIBE")),
            Grant("cluster", "kafka-cluster", ("DESCRIBE",)),
        ),
        ("chaos-panel", "kafka-control"),
    ),
)
"""Every principal but ADMIN, which is a super user and needs no grant."""


def principal_of(program: str) -> str:
    """The principal a supervised program acts as; replica k of `inventory` (`inventory-k`) acts as
    `inventory` does."""
    for principal in PRINCIPALS:
        for name in principal.programs:
            if program == name or (program.startswith(name + "-") and program.removeprefix(name + "-").isdigit()):
                return principal.name
    raise KeyError(f"no Kafka principal for program {program!r}")


def acl_table() -> str:
    """The principals and their grants as a Markdown table (docs/kafka-principals.md shows it)."""
    rows = [
        "| principal | runs as it | allowed |",
        "| --- | --- | --- |",
        f"| `{ADMIN}` | the Kafka nodes, the launcher | everything (super user) |",
    ]
    for principal in PRINCIPALS:
        allowed = "; ".join(
            f"{'/'.join(grant.operations)} {grant.resource} `{grant.name}{'*' if grant.prefixed else ''}`"
            for grant in principal.grants
        )
        programs = ", ".join(f"`{name}`" for name in principal.programs)
        if principal.name == OPERATOR:
            programs += ", `make audit`, `make soak`"
        rows.append(f"| `{principal.name}` | {programs} | {allowed} |")
    return "\n".join(rows) + "\n"
