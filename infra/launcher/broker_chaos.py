"""Faults for the Kafka nodes the launcher runs: kill a partition's leader, freeze a node, restart
the active controller. Each acts on the real processes through the supervisor; none waits for the
cluster to heal (callers watch their own work for that).

Who leads what is read from the cluster itself: a partition's leader from a metadata request, the
active controller from the nodes' KRaft quorum state (the highest epoch's leader).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass

from infra.launcher import kafka_broker
from infra.launcher.errors import LaunchError
from infra.launcher.supervisor import Supervisor
from services.settings import Settings
from services.topology import all_topics


@dataclass(frozen=True)
class Fault:
    """What a broker fault did, for logs and reports."""

    kind: str
    node: int
    process: str
    detail: str

    def describe(self) -> str:
        return f"{self.kind}: {self.process} (node {self.node}) {self.detail}"


def _require_cluster(settings: Settings) -> None:
    if not settings.uses_own_kafka:
        raise LaunchError(
            "broker faults act on the Kafka nodes the launcher runs; KAFKA_BOOTSTRAP_SERVERS points elsewhere",
            "unset KAFKA_BOOTSTRAP_SERVERS, or stop and freeze your own brokers by hand",
        )


def supervised_nodes(supervisor: Supervisor) -> int:
    """How many Kafka nodes the running system supervises (its BROKERS, whatever the environment says)."""
    return sum(1 for info in supervisor.all_info() if kafka_broker.is_node_name(info["name"]))


def process_of(settings: Settings, node: int) -> str:
    return kafka_broker.node_names(settings)[node - 1]


def partition_leader(settings: Settings, topic: str, partition: int) -> int:
    """The node leading `topic`/`partition` now."""
    metadata = kafka_broker.admin_client(settings.kafka_bootstrap_servers).list_topics(topic, timeout=10)
    found = metadata.topics.get(topic)
    if found is None or partition not in found.partitions or found.partitions[partition].leader < 0:
        raise LaunchError(f"{topic}/{partition} has no leader now", "wait for the cluster to elect one")
    return int(found.partitions[partition].leader)


def active_controller(settings: Settings) -> int:
    """The node leading the KRaft quorum: the leader of the highest epoch any node wrote down."""
    best: tuple[int, int] | None = None
    for node in range(1, settings.BROKERS + 1):
        state = kafka_broker.data_dir(settings, node) / "log" / "__cluster_metadata-0" / "quorum-state"
        try:
            quorum = json.loads(state.read_text())
        except (OSError, ValueError):
            continue
        if quorum.get("leaderId", -1) >= 0 and (best is None or quorum["leaderEpoch"] > best[0]):
            best = (quorum["leaderEpoch"], quorum["leaderId"])
    if best is None:
        raise LaunchError("no Kafka node has written its quorum state yet", "wait for the cluster to start")
    return best[1]


def kill_leader(settings: Settings, supervisor: Supervisor, topic: str, partition: int) -> Fault:
    """SIGKILL the node leading `topic`/`partition`; the supervisor starts it again, as after a crash."""
    _require_cluster(settings)
    node = partition_leader(settings, topic, partition)
    supervisor.signal(process_of(settings, node), "KILL")
    return Fault("leader kill", node, process_of(settings, node), f"led {topic}/{partition}; SIGKILL")


def freeze(settings: Settings, supervisor: Supervisor, node: int, seconds: float) -> Fault:
    """SIGSTOP node `node` (a zombie that keeps its connections open) and SIGCONT it `seconds` later,
    from a timer thread: the call returns at once."""
    _require_cluster(settings)
    name = process_of(settings, node)
    supervisor.signal(name, "STOP")
    thaw = threading.Timer(seconds, lambda: Supervisor(settings.EO_STATE_DIR).signal(name, "CONT"))
    thaw.daemon = False  # a frozen node must be thawed even if the caller is done
    thaw.start()
    return Fault("freeze", node, name, f"SIGSTOP for {seconds:g} s, then SIGCONT")


def restart_controller(settings: Settings, supervisor: Supervisor) -> Fault:
    """Stop the active controller's node cleanly and start it again."""
    _require_cluster(settings)
    node = active_controller(settings)
    name = process_of(settings, node)
    supervisor.stop(name)
    supervisor.start(name)
    return Fault("controller restart", node, name, "stopped and started")


def running_cluster(settings: Settings) -> tuple[Settings, Supervisor]:
    """The settings of the cluster that runs (its node count, whatever BROKERS says now) and its
    supervisor; a LaunchError when nothing runs."""
    _require_cluster(settings)
    supervisor = Supervisor(settings.EO_STATE_DIR)
    if not supervisor.is_running():
        raise LaunchError("the system is not running", "`make up BROKERS=3` starts it")
    return settings.model_copy(update={"BROKERS": supervised_nodes(supervisor)}), supervisor


def leaders(settings: Settings, timeout: float = 10) -> dict[int, list[str]]:
    """Node -> the partitions (`topic/n`) of the platform's topics it leads now."""
    metadata = kafka_broker.admin_client(settings.kafka_bootstrap_servers).list_topics(timeout=timeout)
    led: dict[int, list[str]] = {node: [] for node in range(1, settings.BROKERS + 1)}
    for topic in all_topics():
        found = metadata.topics.get(topic)
        for number, partition in sorted(found.partitions.items()) if found else []:
            led.setdefault(int(partition.leader), []).append(f"{topic}/{number}")
    return led
