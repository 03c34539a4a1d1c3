"""The Kafka node's class archive, made once by the launcher, is what a Kafka JVM maps its
classes from (the storage tool here: the same jars and archive as a node, and quick to run)."""

from __future__ import annotations

import os
import subprocess

import pytest

from infra.launcher import kafka_broker, kafka_class_archive
from infra.launcher.preflight import require_java
from services.settings import Settings

pytestmark = pytest.mark.integration


def test_a_kafka_jvm_maps_the_nodes_classes_from_the_archive(settings: Settings) -> None:
    java = require_java(os.environ.get("JAVA_HOME"))
    libs = kafka_broker.ensure_jars(settings, lambda _: None)
    kafka_broker.ensure_class_archive(java, libs, settings, lambda _: None)
    archive = kafka_class_archive.path(java, libs)
    assert archive.exists(), sorted(path.name for path in libs.parent.iterdir())
    made = archive.stat().st_mtime_ns
    kafka_broker.ensure_class_archive(java, libs, settings, lambda _: None)
    assert archive.stat().st_mtime_ns == made  # made once
    command = kafka_broker.java_command(java, libs, settings, "kafka.tools.StorageTool", ["-Xlog:class+load=info"])
    run = subprocess.run([*command, "version"], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-2000:]
    loaded = [line for line in run.stdout.splitlines() if " kafka.server.KafkaConfig " in line]
    assert loaded and loaded[0].endswith("source: shared objects file (top)"), loaded or run.stdout[-2000:]
