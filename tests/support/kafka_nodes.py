"""Three Kafka nodes of a test's own, run as plain child processes: the test decides which one
freezes, which one dies and when it comes back, with no supervisor starting anything again."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import IO

from infra.launcher import kafka_broker
from infra.launcher.preflight import require_java
from services.settings import Settings
from workbench.network import free_port_range


@dataclass
class KafkaNodes:
    settings: Settings
    java: str
    processes: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)
    logs: dict[int, IO[bytes]] = field(default_factory=dict)

    @property
    def bootstrap(self) -> str:
        return self.settings.kafka_bootstrap_servers

    def start(self, node: int) -> None:
        libs = kafka_broker.jar_dir(self.settings)
        log = self.logs.setdefault(node, (kafka_broker.data_dir(self.settings, node) / "node.log").open("ab"))
        self.processes[node] = subprocess.Popen(
            kafka_broker.broker_command(self.java, libs, self.settings, node), stdout=log, stderr=subprocess.STDOUT
        )

    def freeze(self, node: int) -> None:
        self.processes[node].send_signal(signal.SIGSTOP)

    def thaw(self, node: int) -> None:
        self.processes[node].send_signal(signal.SIGCONT)

    def kill(self, node: int) -> None:
        """SIGKILL: the node stays down until start(node)."""
        process = self.processes[node]
        process.send_signal(signal.SIGCONT)
        process.kill()
        process.wait(30)

    def start_any_dead(self) -> None:
        """Start again every node a test before killed, and wait until all three serve."""
        for node in (1, 2, 3):
            if node not in self.alive():
                self.start(node)
        kafka_broker.wait_until_ready(self.bootstrap, 120, brokers=3)

    def alive(self) -> list[int]:
        return [node for node, process in self.processes.items() if process.poll() is None]

    def tail(self, node: int, lines: int = 30) -> str:
        path = kafka_broker.data_dir(self.settings, node) / "node.log"
        return "".join(path.read_text(errors="replace").splitlines(keepends=True)[-lines:])


@contextmanager
def three_kafka_nodes() -> Iterator[KafkaNodes]:
    """Three combined broker/controller nodes on ports and storage of their own, ready to use."""
    base = free_port_range(6)
    state = Settings().EO_STATE_DIR.parent / f"kafka-nodes-{uuid.uuid4().hex[:8]}"
    settings = Settings(
        EO_STATE_DIR=state, BROKERS=3, KAFKA_PORT=base, KAFKA_CONTROLLER_PORT=base + 1, KAFKA_BOOTSTRAP_SERVERS=None
    )
    java = require_java(os.environ.get("JAVA_HOME"))
    libs = kafka_broker.ensure_jars(settings, lambda _: None)
    kafka_broker.ensure_formatted(java, libs, settings, lambda _: None)
    nodes = KafkaNodes(settings, java)
    try:
        for node in (1, 2, 3):
            nodes.start(node)
        kafka_broker.wait_until_ready(nodes.bootstrap, 120, brokers=3)
        yield nodes
    finally:
        for process in nodes.processes.values():
            process.send_signal(signal.SIGCONT)
            process.kill()
            process.wait(30)
        for log in nodes.logs.values():
            log.close()
        shutil.rmtree(state, ignore_errors=True)
