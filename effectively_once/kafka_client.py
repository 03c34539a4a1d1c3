"""How every Kafka client is configured: the servers, and the principal it authenticates as.

A process's principal comes from its settings (`KafkaCredentials`, part of every process's
settings): `KAFKA_USERNAME` and `KAFKA_PASSWORD`, with `KAFKA_SASL_MECHANISM` (default
SCRAM-SHA-512) and `KAFKA_SECURITY_PROTOCOL` (default SASL_PLAINTEXT; SASL_SSL on a network that
needs it). Without a username the client connects without authenticating, which a broker that
enforces ACLs refuses.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic_settings import BaseSettings, SettingsConfigDict

from .kafka_requests import statistics_config, with_counting

MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")
PROTOCOLS = ("SASL_PLAINTEXT", "SASL_SSL")


class KafkaPrincipalError(ValueError):
    """The environment names a principal that cannot be used; the message says which variable."""


@dataclass(frozen=True)
class KafkaPrincipal:
    """A Kafka user and how it proves who it is."""

    username: str
    password: str = field(repr=False)
    mechanism: str = "SCRAM-SHA-512"
    protocol: str = "SASL_PLAINTEXT"

    def __post_init__(self) -> None:
        if not self.username or not self.password:
            raise KafkaPrincipalError("KAFKA_USERNAME and KAFKA_PASSWORD: both are needed, or neither")
        if self.mechanism not in MECHANISMS:
            raise KafkaPrincipalError(f"KAFKA_SASL_MECHANISM: {self.mechanism!r} is not one of {', '.join(MECHANISMS)}")
        if self.protocol not in PROTOCOLS:
            raise KafkaPrincipalError(
                f"KAFKA_SECURITY_PROTOCOL: {self.protocol!r} is not one of {', '.join(PROTOCOLS)}"
            )

    def librdkafka(self) -> dict[str, str]:
        """The settings a confluent-kafka Producer, Consumer or AdminClient takes."""
        return {
            "security.protocol": self.protocol,
            "sasl.mechanism": self.mechanism,
            "sasl.username": self.username,
            "sasl.password": self.password,
        }

    def environment(self) -> dict[str, str]:
        """The variables that make a process (in any of the three stacks) act as this principal."""
        return {
            "KAFKA_USERNAME": self.username,
            "KAFKA_PASSWORD": self.password,
            "KAFKA_SASL_MECHANISM": self.mechanism,
            "KAFKA_SECURITY_PROTOCOL": self.protocol,
        }


ENVIRONMENT_VARIABLES = ("KAFKA_USERNAME", "KAFKA_PASSWORD", "KAFKA_SASL_MECHANISM", "KAFKA_SECURITY_PROTOCOL")


class KafkaCredentials(BaseSettings):
    """The Kafka principal a process acts as, from its environment; every process's settings
    hold these (effectively_once.process.ProcessSettings)."""

    model_config = SettingsConfigDict(extra="ignore")

    KAFKA_USERNAME: str = ""
    KAFKA_PASSWORD: str = ""
    KAFKA_SASL_MECHANISM: str = ""
    """Empty: SCRAM-SHA-512."""
    KAFKA_SECURITY_PROTOCOL: str = ""
    """Empty: SASL_PLAINTEXT."""

    def kafka_principal(self) -> KafkaPrincipal | None:
        """The principal these name, None when they name none; KafkaPrincipalError when they name
        one badly (a username without a password, an unknown mechanism)."""
        if not self.KAFKA_USERNAME and not self.KAFKA_PASSWORD:
            return None
        return KafkaPrincipal(
            self.KAFKA_USERNAME,
            self.KAFKA_PASSWORD,
            self.KAFKA_SASL_MECHANISM or "SCRAM-SHA-512",
            self.KAFKA_SECURITY_PROTOCOL or "SASL_PLAINTEXT",
        )


def principal_from_environment(environ: Mapping[str, str] | None = None) -> KafkaPrincipal | None:
    """The principal the process's environment names (or `environ`, when given, alone)."""
    if environ is None:
        return KafkaCredentials().kafka_principal()
    return KafkaCredentials(**{name: environ.get(name, "") for name in ENVIRONMENT_VARIABLES}).kafka_principal()


KEY_PARTITIONER = {"partitioner": "murmur2_random"}
"""How a producer of the saga's events picks a key's partition: Java's murmur2, as Kafka Connect
(Debezium's relay) and Spring Kafka do, so that an order's events reach one partition
whichever relay or tool sent them (librdkafka's own default, a CRC32, would pick another)."""


def client_config(
    bootstrap_servers: str, settings: Mapping[str, Any] | None = None, principal: KafkaPrincipal | None = None
) -> dict[str, Any]:
    """A client's configuration: the servers, the principal (`principal`, else the environment's),
    the request counting the environment asks for (kafka_requests), then `settings`."""
    principal = principal or principal_from_environment()
    return {
        "bootstrap.servers": bootstrap_servers,
        **(principal.librdkafka() if principal else {}),
        **with_counting(settings or {}, statistics_config()),
    }
