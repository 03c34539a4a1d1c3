"""Apache Kafka, run from its own jars with Java 17 in KRaft mode: one node, or three (BROKERS=3).

The jars come from Maven Central through infra/kafka/pom.xml and are cached outside git, keyed by
the pom's content. Each node is both broker and controller; the nodes of a cluster share one
cluster id, and each node's storage is formatted once. Readiness is a metadata request that names
every node; with three, the launcher also waits until every partition has its full set of in-sync
replicas, so a node may be lost from the first order on.
"""

from __future__ import annotations

import base64
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from string import Template

from confluent_kafka import KafkaException
from confluent_kafka.admin import (  # type: ignore[attr-defined]
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from effectively_once.consumer.share_loop import share_group_id
from effectively_once.kafka_client import KafkaPrincipal, client_config
from infra.launcher import kafka_class_archive, maven_jars
from infra.launcher.errors import LaunchError
from services.kafka_access import ADMIN
from services.settings import PROJECT_ROOT, Settings
from services.topology import SHARE_GROUP_CONSUMERS, TELEMETRY_TOPIC, TOPIC_PARTITIONS, all_topics

KAFKA_DIR = PROJECT_ROOT / "infra" / "kafka"
POM = KAFKA_DIR / "pom.xml"
LOG4J_CONFIG = KAFKA_DIR / "log4j2.xml"
SERVER_TEMPLATE = KAFKA_DIR / "server.properties.template"
SCRAM_MARKER = "formatted-with-scram"
"""Written beside a node's storage once it is formatted with the admin's SCRAM user."""


def _run_or_fail(command: list[str], failure: str, fix: str) -> None:
    """Run a setup command; a LaunchError with the end of its output when it fails."""
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise LaunchError(f"{failure}:\n" + (result.stdout + result.stderr)[-2000:], fix)


def jar_dir(settings: Settings) -> Path:
    """Where this pom's jars are cached; a changed pom gets a fresh directory."""
    return maven_jars.jar_dir(settings, POM, "kafka")


def ensure_jars(settings: Settings, say: Callable[[str], None]) -> Path:
    """The directory of the broker's jars, fetched from Maven Central on the first run only."""
    if not (jar_dir(settings) / ".complete").exists() and not shutil.which("mvn"):
        raise LaunchError(
            "Maven (mvn) was not found, and the Kafka broker's jars are not cached yet",
            "install Maven (on Debian: `apt-get install maven`), or set KAFKA_BOOTSTRAP_SERVERS to use a Kafka you run",
        )
    return maven_jars.ensure(settings, POM, "kafka", "the Kafka broker", say)


def node_names(settings: Settings) -> list[str]:
    """The supervised name of each node, node 1 first: `kafka`, or `kafka-1` to `kafka-3`."""
    return ["kafka"] if settings.BROKERS == 1 else [f"kafka-{node}" for node in range(1, settings.BROKERS + 1)]


def is_node_name(name: str) -> bool:
    """True for a supervised program that is a Kafka node, whichever BROKERS named it."""
    return re.fullmatch(r"kafka(-\d+)?", name) is not None


def data_dir(settings: Settings, node: int = 1) -> Path:
    """Node `node`'s configuration and log directories (a three-node cluster keeps its own)."""
    return settings.EO_STATE_DIR / node_names(settings)[node - 1]


def server_properties(settings: Settings, node: int = 1) -> Path:
    """Render node `node`'s configuration into its state directory and return its path."""
    target = data_dir(settings, node) / "server.properties"
    target.parent.mkdir(parents=True, exist_ok=True)
    client_port, controller_port = settings.kafka_node_ports[node - 1]
    voters = ",".join(f"{n}@127.0.0.1:{port}" for n, (_, port) in enumerate(settings.kafka_node_ports, start=1))
    rendered = Template(SERVER_TEMPLATE.read_text()).substitute(
        NODE_ID=node,
        QUORUM_VOTERS=voters,
        KAFKA_PORT=client_port,
        KAFKA_CONTROLLER_PORT=controller_port,
        KAFKA_LOG_DIR=data_dir(settings, node) / "log",
        REPLICATION_FACTOR=settings.kafka_replication_factor,
        MIN_ISR=settings.kafka_min_insync_replicas,
        ADMIN_USER=ADMIN,
        ADMIN_PASSWORD=settings.kafka_principal(ADMIN).password,
    )
    target.touch(mode=0o600)  # it holds the admin's password
    target.chmod(0o600)
    target.write_text(rendered)
    return target


def java_command(java: str, libs: Path, settings: Settings, main_class: str, options: Iterable[str] = ()) -> list[str]:
    """A Kafka JVM's command line: the heap, KAFKA_JVM_OPTIONS, the class archive if there is one
    (kafka_class_archive), then `options`."""
    return [
        java,
        f"-Xms{settings.KAFKA_HEAP}",
        f"-Xmx{settings.KAFKA_HEAP}",
        *settings.KAFKA_JVM_OPTIONS.split(),
        *kafka_class_archive.options(java, libs),
        *options,
        "-Djava.awt.headless=true",
        f"-Dlog4j2.configurationFile={LOG4J_CONFIG}",
        "-cp",
        f"{libs}/*",
        main_class,
    ]


def new_cluster_id(random_bytes: Callable[[], bytes] = lambda: uuid.uuid4().bytes) -> str:
    """A KRaft cluster id (a UUID in URL-safe base64, as Kafka writes them) that does not begin with
    "-": kafka-storage would take such an id for an option (one start in 64 once failed so)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(random_bytes()).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def _cluster_id_of(settings: Settings) -> str | None:
    """The cluster id a node of this cluster was formatted with, if one was."""
    for node in range(1, settings.BROKERS + 1):
        meta = data_dir(settings, node) / "log" / "meta.properties"
        if meta.exists():
            for line in meta.read_text().splitlines():
                if line.startswith("cluster.id="):
                    return line.removeprefix("cluster.id=").strip()
    return None


def ensure_formatted(java: str, libs: Path, settings: Settings, say: Callable[[str], None]) -> None:
    """Format each node's KRaft storage once (kafka-storage.sh format), all with one cluster id."""
    cluster_id = _cluster_id_of(settings) or new_cluster_id()
    for node in range(1, settings.BROKERS + 1):
        config = server_properties(settings, node)
        marker = data_dir(settings, node) / SCRAM_MARKER
        if (data_dir(settings, node) / "log" / "meta.properties").exists():
            if not marker.exists():
                raise LaunchError(
                    f"{node_names(settings)[node - 1]}'s storage was formatted before Kafka had principals: "
                    "its nodes have no SCRAM user to authenticate with",
                    f"`make down`, remove {data_dir(settings, node).parent}/kafka* (the topics start empty), `make up`",
                )
            continue
        say(f"formatting Kafka's KRaft storage for {node_names(settings)[node - 1]} (first run only)")
        _run_or_fail(
            [
                *java_command(java, libs, settings, "kafka.tools.StorageTool"),
                "format",
                "-t",
                cluster_id,
                "-c",
                str(config),
                # The nodes' own SCRAM user, there before any node starts: they need it to talk.
                "--add-scram",
                f"SCRAM-SHA-512=[name={ADMIN},password={settings.kafka_principal(ADMIN).password}]",
            ],
            "formatting Kafka's storage failed",
            f"remove {data_dir(settings, node)} and run `make up` again",
        )
        marker.write_text("formatted with the admin's SCRAM user\n")


def broker_command(java: str, libs: Path, settings: Settings, node: int = 1, options: Iterable[str] = ()) -> list[str]:
    """Node `node`'s command line, as bin/kafka-server-start.sh would build it."""
    return [*java_command(java, libs, settings, "kafka.Kafka", options), str(server_properties(settings, node))]


def ensure_class_archive(java: str, libs: Path, settings: Settings, say: Callable[[str], None]) -> None:
    """The archive of the node's classes for this Java, made once (kafka_class_archive)."""

    def node(own: Settings, options: list[str]) -> list[str]:
        ensure_formatted(java, libs, own, lambda _: None)
        return broker_command(java, libs, own, 1, options)

    def ready(own: Settings) -> None:
        wait_until_ready(
            own.kafka_bootstrap_servers, kafka_class_archive.READY_TIMEOUT, principal=own.kafka_principal(ADMIN)
        )

    kafka_class_archive.ensure(java, libs, settings, node, ready, say)


def admin_client(bootstrap_servers: str, principal: KafkaPrincipal | None = None) -> AdminClient:
    """An admin client, as `principal`, else as the principal the environment names (the
    launcher's: the admin)."""
    return AdminClient(client_config(bootstrap_servers, {"log_level": 0}, principal))


def wait_until_ready(
    bootstrap_servers: str,
    timeout: float,
    still_starting: Callable[[], None] = lambda: None,
    brokers: int = 1,
    principal: KafkaPrincipal | None = None,
) -> None:
    """Return once a metadata request, as `principal` (else the environment's), answers with
    `brokers` brokers in it."""
    admin = admin_client(bootstrap_servers, principal)
    deadline = time.monotonic() + timeout
    last_error = "no answer"
    while time.monotonic() < deadline:
        still_starting()
        try:
            metadata = admin.list_topics(timeout=2)
            if len(metadata.brokers) >= brokers:
                return
            last_error = f"{len(metadata.brokers)} of {brokers} brokers answer"
        except KafkaException as error:
            last_error = str(error)
        time.sleep(0.2)
    raise LaunchError(
        f"Kafka at {bootstrap_servers} did not answer a metadata request within {timeout:.0f} s ({last_error})",
        "read the broker's log (`make logs`), or check KAFKA_BOOTSTRAP_SERVERS",
    )


def under_replicated(bootstrap_servers: str, replication_factor: int, topics: Iterable[str]) -> list[str]:
    """`topic/partition` of each partition of `topics` with fewer in-sync replicas than
    `replication_factor`, or no leader; a topic not there yet counts as one such entry."""
    metadata = admin_client(bootstrap_servers).list_topics(timeout=10)
    short = []
    for topic in topics:
        found = metadata.topics.get(topic)
        if found is None or found.error is not None:
            short.append(f"{topic} (missing)")
            continue
        for number, partition in sorted(found.partitions.items()):
            if partition.leader < 0 or len(partition.isrs) < replication_factor:
                short.append(f"{topic}/{number}")
    return short


def wait_until_replicated(
    bootstrap_servers: str,
    replication_factor: int,
    timeout: float,
    topics: Iterable[str] = (),
    still_starting: Callable[[], None] = lambda: None,
) -> None:
    """Return once every partition of `topics` (every platform topic by default) has a leader and
    `replication_factor` in-sync replicas."""
    wanted = tuple(topics) or all_topics()
    deadline = time.monotonic() + timeout
    while short := under_replicated(bootstrap_servers, replication_factor, wanted):
        still_starting()
        if time.monotonic() > deadline:
            raise LaunchError(
                f"{len(short)} partitions lack their {replication_factor} in-sync replicas after {timeout:.0f} s: "
                + ", ".join(short[:10]),
                "read the brokers' logs (`make logs`): a node that does not catch up is named there",
            )
        time.sleep(0.2)


TOPIC_CONFIG = {TELEMETRY_TOPIC: {"retention.ms": str(24 * 3600 * 1000)}}
"""Telemetry is for looking back over a workshop day, not for keeping."""


PLATFORM_SHARE_GROUPS = tuple(share_group_id(consumer) for consumer in SHARE_GROUP_CONSUMERS)
"""The share groups SHARE_GROUPS=on runs."""
SHARE_GROUP_CONFIG = {"share.auto.offset.reset": "earliest"}
"""What each share group starts with: from the beginning of its topics (a share group's own default
is the end, which would skip what was written before its first member joined)."""


def ensure_share_groups(
    bootstrap_servers: str,
    groups: tuple[str, ...] = PLATFORM_SHARE_GROUPS,
    lock_seconds: float | None = None,
) -> None:
    """Give each share group its configuration (before or after it has members: both hold), and
    with `lock_seconds` how long a record stays locked to the member that received it (the
    broker's group.share.record.lock.duration.ms otherwise, 30 s)."""
    admin = admin_client(bootstrap_servers)
    config = dict(SHARE_GROUP_CONFIG)
    if lock_seconds is not None:
        config["share.record.lock.duration.ms"] = str(round(lock_seconds * 1000))
    resources = [
        ConfigResource(
            ResourceType.GROUP,
            group,
            incremental_configs=[
                ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET) for name, value in config.items()
            ],
        )
        for group in groups
    ]
    for group, future in admin.incremental_alter_configs(resources).items():
        try:
            future.result()
        except KafkaException as error:
            raise LaunchError(
                f"could not configure share group {group}: {error}", "read the broker's log (`make logs`)"
            ) from error
    # A member that joins before its group's configuration reached the group coordinator would
    # start the group at the end of the topics: return once the brokers show it.
    deadline = time.monotonic() + 30
    while not all(_shows(admin, group, config) for group in groups):
        if time.monotonic() > deadline:
            raise LaunchError("the share groups' configuration did not show within 30 s", "read the brokers' logs")
        time.sleep(0.1)


def _shows(admin: AdminClient, group: str, config: dict[str, str]) -> bool:
    described = admin.describe_configs([ConfigResource(ResourceType.GROUP, group)])
    entries = next(iter(described.values())).result()
    return all(name in entries and entries[name].value == value for name, value in config.items())


def ensure_topics(bootstrap_servers: str, topics: tuple[str, ...] = ()) -> list[str]:
    """Create every platform topic that does not exist yet; return the ones created."""
    admin = admin_client(bootstrap_servers)
    wanted = topics or all_topics()
    existing = set(admin.list_topics(timeout=10).topics)
    missing = [topic for topic in wanted if topic not in existing]
    if not missing:
        return []
    futures = admin.create_topics(
        [
            NewTopic(topic, num_partitions=TOPIC_PARTITIONS, replication_factor=-1, config=TOPIC_CONFIG.get(topic, {}))
            for topic in missing
        ],
        operation_timeout=30,
    )
    for topic, future in futures.items():
        try:
            future.result()
        except KafkaException as error:
            if error.args[0].name() != "TOPIC_ALREADY_EXISTS":
                raise LaunchError(
                    f"could not create topic {topic}: {error}",
                    "read the broker's log (`make logs`)",
                ) from error
    return missing
