"""Apache Kafka's broker, run from its own jars with Java 17 in KRaft mode.

The jars come from Maven Central through infra/kafka/pom.xml and are cached outside git, keyed by
the pom's content. Storage is formatted once; readiness is a metadata request that answers.
"""

from __future__ import annotations

import base64
import hashlib
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from string import Template

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

from infra.launcher.errors import LaunchError
from services.settings import PROJECT_ROOT, Settings
from services.topology import TELEMETRY_TOPIC, TOPIC_PARTITIONS, all_topics

KAFKA_DIR = PROJECT_ROOT / "infra" / "kafka"
POM = KAFKA_DIR / "pom.xml"
LOG4J_CONFIG = KAFKA_DIR / "log4j2.xml"
SERVER_TEMPLATE = KAFKA_DIR / "server.properties.template"


def jar_dir(settings: Settings) -> Path:
    """Where this pom's jars are cached; a changed pom gets a fresh directory."""
    digest = hashlib.sha1(POM.read_bytes()).hexdigest()[:12]
    return settings.EO_CACHE_DIR / "kafka" / digest / "libs"


def ensure_jars(settings: Settings, say: Callable[[str], None]) -> Path:
    """The directory of the broker's jars, fetched from Maven Central on the first run only."""
    libs = jar_dir(settings)
    if (libs / ".complete").exists():
        return libs
    mvn = shutil.which("mvn")
    if not mvn:
        raise LaunchError(
            "Maven (mvn) was not found, and the Kafka broker's jars are not cached yet",
            "install Maven (on Debian: `apt-get install maven`), or set KAFKA_BOOTSTRAP_SERVERS to use a Kafka you run",
        )
    say("fetching the Kafka broker's jars from Maven Central (first run only, ~30 s)")
    staging = libs.with_name("libs.partial")
    shutil.rmtree(staging, ignore_errors=True)
    started = time.monotonic()
    result = subprocess.run(
        [
            mvn,
            "-B",
            "-q",
            "-f",
            str(POM),
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={staging}",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise LaunchError(
            "Maven could not fetch the Kafka broker's jars:\n" + (result.stdout + result.stderr)[-2000:],
            "check that Maven Central is reachable (`mvn -f infra/kafka/pom.xml dependency:resolve`)",
        )
    (staging / ".complete").write_text(POM.read_text())
    shutil.rmtree(libs, ignore_errors=True)
    staging.rename(libs)
    say(f"fetched {len(list(libs.glob('*.jar')))} jars in {time.monotonic() - started:.0f} s")
    return libs


def data_dir(settings: Settings) -> Path:
    return settings.EO_STATE_DIR / "kafka"


def server_properties(settings: Settings) -> Path:
    """Render the broker's configuration into the state directory and return its path."""
    target = data_dir(settings) / "server.properties"
    target.parent.mkdir(parents=True, exist_ok=True)
    rendered = Template(SERVER_TEMPLATE.read_text()).substitute(
        KAFKA_PORT=settings.KAFKA_PORT,
        KAFKA_CONTROLLER_PORT=settings.KAFKA_CONTROLLER_PORT,
        KAFKA_LOG_DIR=data_dir(settings) / "log",
    )
    target.write_text(rendered)
    return target


def java_command(java: str, libs: Path, settings: Settings, main_class: str) -> list[str]:
    return [
        java,
        f"-Xms{settings.KAFKA_HEAP}",
        f"-Xmx{settings.KAFKA_HEAP}",
        "-XX:+UseG1GC",
        "-XX:MaxGCPauseMillis=20",
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


def ensure_formatted(java: str, libs: Path, settings: Settings, say: Callable[[str], None]) -> None:
    """Format the KRaft storage directory once (kafka-storage.sh format)."""
    config = server_properties(settings)
    if (data_dir(settings) / "log" / "meta.properties").exists():
        return
    cluster_id = new_cluster_id()
    say("formatting Kafka's KRaft storage (first run only)")
    result = subprocess.run(
        [
            *java_command(java, libs, settings, "kafka.tools.StorageTool"),
            "format",
            "-t",
            cluster_id,
            "-c",
            str(config),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise LaunchError(
            "formatting Kafka's storage failed:\n" + (result.stdout + result.stderr)[-2000:],
            f"remove {data_dir(settings)} and run `make up` again",
        )


def broker_command(java: str, libs: Path, settings: Settings) -> list[str]:
    """The broker's command line, as bin/kafka-server-start.sh would build it."""
    return [*java_command(java, libs, settings, "kafka.Kafka"), str(server_properties(settings))]


def admin_client(bootstrap_servers: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap_servers, "log_level": 0})


def wait_until_ready(bootstrap_servers: str, timeout: float, still_starting: Callable[[], None] = lambda: None) -> None:
    """Return once the broker answers a metadata request with a broker in it."""
    admin = admin_client(bootstrap_servers)
    deadline = time.monotonic() + timeout
    last_error = "no answer"
    while time.monotonic() < deadline:
        still_starting()
        try:
            metadata = admin.list_topics(timeout=2)
            if metadata.brokers:
                return
        except KafkaException as error:
            last_error = str(error)
    raise LaunchError(
        f"Kafka at {bootstrap_servers} did not answer a metadata request within {timeout:.0f} s ({last_error})",
        "read the broker's log (`make logs`), or check KAFKA_BOOTSTRAP_SERVERS",
    )


TOPIC_CONFIG = {TELEMETRY_TOPIC: {"retention.ms": str(24 * 3600 * 1000)}}
"""Telemetry is for looking back over a workshop day, not for keeping."""


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
