"""A class-data archive of the Kafka node's classes (Java's AppCDS), made once beside the jars.

A Kafka node loads some ten thousand classes as it starts; parsing and verifying them from the
jars is most of a start's CPU. A node (and the storage tool that formats one) started with
`-XX:SharedArchiveFile` maps them from the archive instead. On the 2-core machine a node's start
took about half the CPU and half the time with it (`make bench` does not depend on it: a node's
speed once started is the same). The archive is made by `prepare` (and `up`) the first time: one
node of its own, on a state directory of its own, started with `-XX:ArchiveClassesAtExit`, made to
answer a metadata request and take a record, and stopped (SIGTERM); Java writes the classes it
loaded as it exits. It is kept per Kafka (the jars' directory) and per Java (its build): a
different Java gets its own. A Java that cannot write one leaves a note; an archive that could not
be made (a node that did not start) is said, and tried again next time; either way the nodes start
without it, as before.
"""

from __future__ import annotations

import hashlib
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from effectively_once.contract.ports import free_port
from effectively_once.kafka_client import client_config
from infra.launcher.errors import LaunchError
from services.kafka_access import ADMIN
from services.settings import Settings

READY_TIMEOUT = 90.0
"""How long the archiving node may take to answer a metadata request (kafka_broker.wait_until_ready)."""


def path(java: str, libs: Path) -> Path:
    """Where the archive of this Kafka's classes for this Java is kept."""
    binary = Path(shutil.which(java) or java).resolve()
    jvm = next(iter(sorted(binary.parent.parent.glob("lib/server/libjvm.so"))), binary)
    stat = jvm.stat() if jvm.exists() else None
    build = f"{binary}:{stat.st_size}:{stat.st_mtime_ns}" if stat else str(binary)
    return libs.parent / f"classes-{hashlib.sha1(build.encode()).hexdigest()[:12]}.jsa"


def options(java: str, libs: Path) -> list[str]:
    """The JVM option that maps the archive, if there is one for this Java; none otherwise."""
    archive = path(java, libs)
    return [f"-XX:SharedArchiveFile={archive}"] if archive.exists() else []


def ensure(
    java: str,
    libs: Path,
    settings: Settings,
    node: Callable[[Settings, list[str]], list[str]],
    ready: Callable[[Settings], None],
    say: Callable[[str], None],
) -> None:
    """Make the archive if this Java has none yet. `node(settings, jvm_options)` formats a node's
    storage for `settings` and gives the command line that starts it with `jvm_options` added;
    `ready(settings)` returns once that node answers, or raises LaunchError."""
    archive = path(java, libs)
    unavailable = archive.with_suffix(".unavailable")
    if archive.exists() or unavailable.exists():
        return
    say("archiving the Kafka node's classes for faster starts (first run only, ~15 s)")
    state = Path(tempfile.mkdtemp(prefix="kafka-class-archive-", dir=settings.EO_CACHE_DIR))
    client = free_port()
    own = settings.model_copy(
        update={
            "EO_STATE_DIR": state,
            "BROKERS": 1,
            "KAFKA_PORT": client,
            "KAFKA_CONTROLLER_PORT": free_port(excluding={client}),
            "KAFKA_BOOTSTRAP_SERVERS": None,
        }
    )
    written = archive.with_name(f"{archive.stem}.{time.monotonic_ns()}.partial")
    try:
        _run_node_once(own, node(own, [f"-XX:ArchiveClassesAtExit={written}"]), state, ready)
        if written.exists():
            written.replace(archive)  # whole, or not there: two prepares never see half of one
        else:
            unavailable.write_text("this Java wrote no class archive; Kafka's nodes start without one\n")
    except (OSError, KafkaException, TimeoutError, LaunchError) as error:  # the nodes start without it
        say(f"no class archive made ({error}); Kafka's nodes start without one")
    finally:
        written.unlink(missing_ok=True)
        shutil.rmtree(state, ignore_errors=True)


def _run_node_once(settings: Settings, node: list[str], state: Path, ready: Callable[[Settings], None]) -> None:
    """Start the node, wait until it answers and takes a record, and stop it as `make down` does."""
    with (state / "node.log").open("wb") as log:
        process = subprocess.Popen(node, stdout=log, stderr=subprocess.STDOUT)
        try:
            ready(settings)
            _take_a_record(settings)
        finally:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


def _take_a_record(settings: Settings) -> None:
    """Create a topic on the node and have it take one record: the classes a node loads to serve
    one are in the archive too."""
    config = client_config(settings.kafka_bootstrap_servers, {"log_level": 0}, settings.kafka_principal(ADMIN))
    admin = AdminClient(config)
    admin.create_topics([NewTopic("class-archive", 1, 1)])["class-archive"].result(30)
    producer = Producer({**config, "acks": "all"})
    producer.produce("class-archive", b"one record")
    if producer.flush(30) != 0:
        raise TimeoutError("the archiving node did not take its record within 30 s")
