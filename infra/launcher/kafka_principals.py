"""Make the cluster's users and ACLs what services/kafka_access.py says: one SCRAM user per
principal, each with its grants and nothing more (an ACL no longer listed there is removed).

Runs as the admin principal, at every `make up` and `provision`: upserting a user and creating an
ACL that exists are both no-ops.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future
from typing import Any

from confluent_kafka import KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from infra.launcher.errors import LaunchError
from infra.launcher.kafka_broker import admin_client
from services.kafka_access import PRINCIPALS, Principal
from services.settings import Settings

SCRAM_ITERATIONS = 8192
_RESOURCES = {"topic": ResourceType.TOPIC, "group": ResourceType.GROUP, "cluster": ResourceType.BROKER}


EVERY_ACL = AclBindingFilter(
    ResourceType.ANY,
    None,  # type: ignore[arg-type]  # None matches any name, principal and host
    ResourcePatternType.ANY,
    None,  # type: ignore[arg-type]
    None,  # type: ignore[arg-type]
    AclOperation.ANY,
    AclPermissionType.ANY,
)


def bindings(principal: Principal) -> list[AclBinding]:
    """The ACLs that give `principal` its grants."""
    return [
        AclBinding(
            _RESOURCES[grant.resource],
            grant.name,
            ResourcePatternType.PREFIXED if grant.prefixed else ResourcePatternType.LITERAL,
            f"User:{principal.name}",
            "*",
            AclOperation[operation],
            AclPermissionType.ALLOW,
        )
        for grant in principal.grants
        for operation in grant.operations
    ]


def acl_key(binding: AclBinding) -> tuple[Any, ...]:
    """What makes an ACL the one it is, in AclBindingFilter's order (a filter that matches it alone)."""
    return (
        binding.restype,
        binding.name,
        binding.resource_pattern_type,
        binding.principal,
        binding.host,
        binding.operation,
        binding.permission_type,
    )


def _wait(futures: Mapping[Any, Future[Any]], what: str) -> None:
    for future in futures.values():
        try:
            future.result()
        except KafkaException as error:
            raise LaunchError(f"could not {what}: {error}", "read the brokers' logs (`make logs`)") from error


def ensure_principals(bootstrap_servers: str, settings: Settings) -> int:
    """Create or update every principal's SCRAM user and ACLs; return how many ACLs were added or
    removed."""
    admin = admin_client(bootstrap_servers)
    _wait(
        admin.alter_user_scram_credentials(
            [
                UserScramCredentialUpsertion(
                    principal.name,
                    ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, SCRAM_ITERATIONS),
                    settings.kafka_principal(principal.name).password.encode(),
                )
                for principal in PRINCIPALS
            ]
        ),
        "create the Kafka users",
    )
    wanted = {acl_key(binding): binding for principal in PRINCIPALS for binding in bindings(principal)}
    managed = {f"User:{principal.name}" for principal in PRINCIPALS}
    existing = {acl_key(binding): binding for binding in admin.describe_acls(EVERY_ACL).result()}
    missing = [binding for key, binding in wanted.items() if key not in existing]
    stale = [binding for key, binding in existing.items() if key not in wanted and binding.principal in managed]
    if missing:
        _wait(admin.create_acls(missing), "create the Kafka ACLs")
    if stale:
        _wait(
            admin.delete_acls([AclBindingFilter(*acl_key(binding)) for binding in stale]),
            "remove Kafka ACLs no longer granted",
        )
    return len(missing) + len(stale)
