"""Where the Kafka node's class archive is kept, and when a JVM is told to map it."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.launcher import kafka_broker, kafka_class_archive
from services.settings import Settings

pytestmark = pytest.mark.unit


def _java(home: Path, libjvm: bytes) -> str:
    (home / "bin").mkdir(parents=True)
    (home / "lib" / "server").mkdir(parents=True)
    (home / "lib" / "server" / "libjvm.so").write_bytes(libjvm)
    java = home / "bin" / "java"
    java.write_text("#!/bin/sh\n")
    return str(java)


def test_each_java_build_has_an_archive_of_its_own_beside_the_jars(tmp_path: Path) -> None:
    libs = tmp_path / "kafka" / "abc" / "libs"
    one, other = _java(tmp_path / "one", b"a build"), _java(tmp_path / "other", b"another build")
    assert kafka_class_archive.path(one, libs).parent == libs.parent
    assert kafka_class_archive.path(one, libs) == kafka_class_archive.path(one, libs)
    assert kafka_class_archive.path(one, libs) != kafka_class_archive.path(other, libs)


def test_a_kafka_jvm_maps_the_archive_only_once_there_is_one(tmp_path: Path) -> None:
    libs = tmp_path / "kafka" / "abc" / "libs"
    libs.mkdir(parents=True)
    java = _java(tmp_path / "jdk", b"a build")
    settings = Settings(EO_STATE_DIR=tmp_path / "state", KAFKA_JVM_OPTIONS="-XX:+UseSerialGC")
    without = kafka_broker.java_command(java, libs, settings, "kafka.Kafka")
    assert not [option for option in without if option.startswith("-XX:SharedArchiveFile")]
    kafka_class_archive.path(java, libs).write_bytes(b"archive")
    with_it = kafka_broker.java_command(java, libs, settings, "kafka.Kafka", ["-Xlog:cds"])
    archive = f"-XX:SharedArchiveFile={kafka_class_archive.path(java, libs)}"
    assert with_it.index("-XX:+UseSerialGC") < with_it.index(archive) < with_it.index("-Xlog:cds")
    assert with_it[with_it.index("-cp") + 2] == "kafka.Kafka"
