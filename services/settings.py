"""The platform's configuration: one pydantic-settings class, read from the environment and `.env`.

Both paths (native launcher and docker-compose) use these same variable names. `.env.example`
lists every one of them with its default.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from pathlib import Path
from typing import Literal
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from effectively_once.kafka_client import KafkaPrincipal
from effectively_once.pending_work import WorkerSettings
from services.topology import AUDITOR_ROLE, RELAY_ROLE, ServiceDatabase

_WORKER = WorkerSettings.model_fields

PROJECT_ROOT = Path(__file__).resolve().parent.parent

DEVELOPMENT_PASSWORD_SUFFIX = "-dev-password"


def _default_state_dir() -> Path:
    # Under /var/tmp rather than the checkout: when run as root, PostgreSQL runs as the
    # `postgres` user, which must be able to reach its data directory, and a checkout under
    # /root would be out of its reach. One state directory per checkout.
    digest = hashlib.sha1(str(PROJECT_ROOT).encode()).hexdigest()[:8]
    return Path("/var/tmp") / f"effectively-once-{os.getuid()}" / f"{PROJECT_ROOT.name}-{digest}"


def _default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "effectively-once"


class Settings(BaseSettings):
    """Every setting of the platform, with its default for a local development run."""

    model_config = SettingsConfigDict(env_file=PROJECT_ROOT / ".env", env_file_encoding="utf-8", extra="ignore")

    EO_ENV: Literal["development", "production"] = "development"
    """`production` refuses the development default passwords."""

    DATABASE_URL: str | None = None
    """For the launcher: a PostgreSQL server's admin URL to use instead of running our own.
    For a service process: that service's own database (the launcher passes it)."""
    POSTGRES_HOST: str = "127.0.0.1"
    # Every default port sits below the kernel's ephemeral range (32768-60999 on Linux): a port in
    # that range can be held, at any moment, by some outgoing connection's local end.
    POSTGRES_PORT: int = 25432
    """The port of the PostgreSQL cluster the launcher runs when DATABASE_URL is not set."""
    POSTGRES_PASSWORD: str = "postgres" + DEVELOPMENT_PASSWORD_SUFFIX
    POSTGRES: Literal["single", "ha"] = "single"
    """The PostgreSQL the launcher runs: one server (`single`), or a primary and a streaming standby
    (`ha`: `make up POSTGRES=ha`), node n on POSTGRES_PORT + n - 1. Every process then connects
    through both nodes' addresses with target_session_attrs=read-write, so it follows a promotion
    without a restart (docs/postgres-failover.md)."""
    POSTGRES_SYNC: Literal["on", "off"] = "on"
    """With POSTGRES=ha: `on`, a commit returns once the standby has flushed it (nothing committed
    is lost in a failover); `off`, the standby follows asynchronously (a failover can lose what
    the primary had committed and the standby had not received)."""

    KAFKA_BOOTSTRAP_SERVERS: str | None = None
    """A Kafka cluster to use instead of the broker the launcher runs."""
    KAFKA_MASTER_PASSWORD: str = "kafka" + DEVELOPMENT_PASSWORD_SUFFIX
    """The secret each Kafka principal's password is derived from (services/kafka_access.py names
    the principals); each process is given its own password only."""
    KAFKA_PASSWORDS: dict[str, str] = Field(default_factory=dict)
    """Principal -> password, where a password is set rather than derived (docker-compose gives
    each service its own KAFKA_PASSWORD_<PRINCIPAL> and provisioning these same ones)."""
    KAFKA_PORT: int = 29092
    """The first node's client port; node n listens on KAFKA_PORT + 2 (n - 1)."""
    KAFKA_CONTROLLER_PORT: int = 29093
    """The first node's controller port; node n's is KAFKA_CONTROLLER_PORT + 2 (n - 1)."""
    KAFKA_HEAP: str = "512m"
    KAFKA_JVM_OPTIONS: str = "-XX:+UseG1GC -XX:MaxGCPauseMillis=20"
    """The flags, besides the heap, of every Kafka JVM the launcher runs (the nodes, their storage
    tool, the Connect worker). The tests' systems run theirs with the C1 compiler only and the
    serial collector (tests/support/stacks.JAVA_QUICK_START): about 40 % less CPU for a node's first
    minute, slower code after it."""
    BROKERS: int = 1
    """Kafka nodes the launcher runs: 1 for the quick demo, 3 for the topology to copy (every topic
    replicated 3 times, min.insync.replicas=2, unclean leader election off): `make up BROKERS=3`."""
    GROUP_PROTOCOL: Literal["classic", "consumer"] = "consumer"
    """The Kafka group protocol of the consumers (CONSUMER_GROUP_PROTOCOL of each process, in every
    implementation): consumer (KIP-848: the broker assigns
    partitions and no rebalance stops a member; docs/consumer-runtime.md), or classic."""
    SHARE_GROUPS: Literal["off", "on"] = "off"
    """on: the sales projection and the notification dispatch consume as share groups (KIP-932),
    each process running SHARE_MEMBERS members over the topics' partitions, every record
    acknowledged on its own after its transaction (docs/share-groups.md)."""
    SHARE_MEMBERS: int = Field(default=4, ge=1, le=16)
    """Share-group members in each such process: more than a topic's partitions, which a consumer
    group could not use."""
    SHARE_LOCK_SECONDS: float = Field(default=30, ge=1, le=3600)
    """How long a share group's record stays locked to the member that received it: a handler that
    runs longer loses it to another member (the group's share.record.lock.duration.ms)."""

    CHAOS_PANEL_HOST: str = "127.0.0.1"
    CHAOS_PANEL_PORT: int = 8080
    CHAOS_PANEL_TOKEN: str = ""
    """Needed by the panel's control actions when CHAOS_PANEL_HOST is not loopback (the panel
    makes one up and logs it when this is empty)."""
    ALLOWED_HOSTS: str = ""
    """Host names (comma-separated) every HTTP service and control endpoint answers to besides the
    loopback names and IP literals: the public name, when the panel listens beyond loopback. Any
    other Host is refused (a DNS-rebinding page arrives under a name of its own)."""
    ORDERS_API_PORT: int = 8000
    PAYMENT_PROVIDER_PORT: int = 8001
    MAIL_PORT: int = 8002
    PROMETHEUS_PORT: int = 9090
    PROMETHEUS_SCRAPE_INTERVAL_SECONDS: float = 5
    """How often Prometheus scrapes every process (native path)."""
    REPLICAS: int = Field(default=1, ge=1, le=5)
    """Instances of each consumer (in the same groups) and of the relay: `make up REPLICAS=3`."""
    CONSUMER_WORKERS: int = Field(default=1, ge=1, le=16)
    """Key-ordered workers inside each consumer group member: `make up CONSUMER_WORKERS=4`."""
    INVENTORY_IMPL: Literal["python", "java", "node"] = "python"
    """Which implementation runs in the inventory slot: `make up INVENTORY_IMPL=java` (Spring Boot,
    services/inventory-java) or `node` (TypeScript, services/inventory-node). They keep the same
    contract (docs/consumer-process-contract.md); only the Python one has the teaching strategies."""
    RELAY: Literal["builtin", "debezium"] = "builtin"
    """Which relay publishes the outboxes: the runtime's own (`builtin`), or Debezium's PostgreSQL
    connector and outbox event router in Kafka Connect, reading the write-ahead log
    (`make up RELAY=debezium`; docs/debezium-relay.md)."""
    KAFKA_CONNECT_PORT: int = 28083
    """The REST port of the Kafka Connect worker that RELAY=debezium runs."""
    KAFKA_CONNECT_HEAP: str = "384m"
    JAVA_HOME: str | None = None
    """The Java 17+ the launcher runs Kafka and Kafka Connect with; unset: `java` on the PATH."""
    PG_BINDIR: str | None = None
    """The PostgreSQL server's bin directory the launcher runs; unset: the newest one installed."""
    BENCH_SUSTAIN_WINDOW: float = Field(default=60, gt=0)
    """`make bench`: how long each probe of the saga's sustainable rate lasts, in seconds."""
    KAFKA_STATISTICS_INTERVAL_MS: int = Field(default=0, ge=0)
    """When above 0, every Python process's Kafka clients count their requests by kind this often
    (eo_kafka_requests_total, effectively_once/kafka_requests.py): what `make bench` counts per order.
    Off by default: librdkafka's statistics cost a little CPU in every client."""
    CONTROL_PORT_BASE: int = 9100
    """Each background process (relay, consumers, executors) serves /metrics and /faults on
    CONTROL_PORT_BASE + its number (infra/launcher/processes.py)."""
    PENDING_WORK_MAX_AGE_SECONDS: float = Field(default=_WORKER["PENDING_WORK_MAX_AGE_SECONDS"].default, gt=0)
    """How long the executors retry transient failures of a remote call before they park it
    (docs/parked-work.md); the runtime's default (WorkerSettings)."""
    PENDING_WORK_MAX_DELAY_SECONDS: float = Field(default=_WORKER["PENDING_WORK_MAX_DELAY_SECONDS"].default, gt=0)
    """The longest wait between two tries of a remote call; the runtime's default."""

    ORDERS_DB_PASSWORD: str = "orders" + DEVELOPMENT_PASSWORD_SUFFIX
    INVENTORY_DB_PASSWORD: str = "inventory" + DEVELOPMENT_PASSWORD_SUFFIX
    PAYMENT_DB_PASSWORD: str = "payment" + DEVELOPMENT_PASSWORD_SUFFIX
    NOTIFICATION_DB_PASSWORD: str = "notification" + DEVELOPMENT_PASSWORD_SUFFIX
    PAYMENT_PROVIDER_DB_PASSWORD: str = "payment_provider" + DEVELOPMENT_PASSWORD_SUFFIX
    MAIL_DB_PASSWORD: str = "mail" + DEVELOPMENT_PASSWORD_SUFFIX
    AUDITOR_DB_PASSWORD: str = "auditor" + DEVELOPMENT_PASSWORD_SUFFIX
    SANDBOX_ADMIN_PASSWORD: str = "sandbox-admin" + DEVELOPMENT_PASSWORD_SUFFIX
    """What the sandboxes' /admin/faults need as `Authorization: Bearer` (the panel sends it)."""
    OUTBOX_RELAY_DB_PASSWORD: str = "outbox_relay" + DEVELOPMENT_PASSWORD_SUFFIX
    OUTBOX_CDC_DB_PASSWORD: str = "outbox_cdc" + DEVELOPMENT_PASSWORD_SUFFIX
    """The secret each database's replication role (RELAY=debezium) derives its password from."""

    EO_STATE_DIR: Path = Field(default_factory=_default_state_dir)
    """Data, logs and sockets of the native run (PostgreSQL data, Kafka log dirs, supervisor)."""
    EO_CACHE_DIR: Path = Field(default_factory=_default_cache_dir)
    """Downloads kept between runs and checkouts: Kafka's jars."""

    @model_validator(mode="after")
    def _refuse_development_secrets_outside_development(self) -> Settings:
        if self.EO_ENV != "development":
            weak = [
                name
                for name, value in self.model_dump().items()
                if name.endswith("PASSWORD") and str(value).endswith(DEVELOPMENT_PASSWORD_SUFFIX)
            ] + [
                f"KAFKA_PASSWORDS[{principal}]"
                for principal, password in self.KAFKA_PASSWORDS.items()
                if password.endswith(DEVELOPMENT_PASSWORD_SUFFIX)
            ]
            if weak:
                raise ValueError(
                    "EO_ENV=production refuses the development default passwords; set " + ", ".join(sorted(weak))
                )
        return self

    @field_validator("BROKERS")
    @classmethod
    def _one_or_three_brokers(cls, brokers: int) -> int:
        if brokers not in (1, 3):
            raise ValueError("BROKERS is 1 (the quick demo) or 3 (replicated: a node may be lost)")
        return brokers

    @model_validator(mode="after")
    def _refuse_what_cannot_follow_a_promotion(self) -> Settings:
        if self.POSTGRES == "ha" and self.RELAY == "debezium":
            raise ValueError(
                "RELAY=debezium reads logical replication slots, which PostgreSQL 15 does not carry over "
                "to a promoted standby: run POSTGRES=ha with RELAY=builtin (docs/postgres-failover.md)"
            )
        if self.POSTGRES == "ha" and self.INVENTORY_IMPL != "python":
            raise ValueError(
                f"INVENTORY_IMPL={self.INVENTORY_IMPL} reads one postgresql:// host, and POSTGRES=ha names two: "
                "run the pair with INVENTORY_IMPL=python (docs/postgres-failover.md)"
            )
        return self

    @model_validator(mode="after")
    def _refuse_overlapping_kafka_ports(self) -> Settings:
        ports = [port for pair in self.kafka_node_ports for port in pair]
        if len(set(ports)) != len(ports):
            raise ValueError(
                f"with BROKERS={self.BROKERS}, the Kafka nodes' ports overlap ({sorted(ports)}): node n listens on "
                "KAFKA_PORT + 2(n-1) and KAFKA_CONTROLLER_PORT + 2(n-1); set KAFKA_CONTROLLER_PORT = KAFKA_PORT + 1"
            )
        return self

    # Derived values -------------------------------------------------------------------

    @property
    def uses_own_postgres(self) -> bool:
        """True when the launcher runs its own PostgreSQL cluster."""
        return not self.DATABASE_URL

    @property
    def uses_own_kafka(self) -> bool:
        """True when the launcher runs its own Kafka broker."""
        return not self.KAFKA_BOOTSTRAP_SERVERS

    @property
    def postgres_node_ports(self) -> list[int]:
        """The port of each PostgreSQL node the launcher runs, node 1 first."""
        return [self.POSTGRES_PORT + n for n in range(2 if self.POSTGRES == "ha" else 1)]

    @property
    def postgres_socket_dir(self) -> Path:
        """Where the PostgreSQL the launcher runs has its unix sockets, one per node (each named by
        its port)."""
        return self.EO_STATE_DIR / "postgres" / "run"

    @property
    def admin_database_url(self) -> str:
        """The superuser URL used to create roles, databases and run migrations: with POSTGRES=ha,
        both nodes' addresses and target_session_attrs=read-write, which finds the primary.

        For the PostgreSQL the launcher runs, the URL's `host` query names its socket directory:
        libpq then connects through each node's unix socket, which costs both ends less CPU a round
        trip than loopback TCP, with the same password (its pg_hba asks scram-sha-256 on both). The
        TCP addresses stay in the URL for what reads them (`database_hosts`, a JDBC URL); a copy of
        the URL without its query connects over TCP."""
        if self.DATABASE_URL:
            return self.DATABASE_URL
        password = quote(self.POSTGRES_PASSWORD, safe="")
        hosts = ",".join(f"{self.POSTGRES_HOST}:{port}" for port in self.postgres_node_ports)
        sockets = ",".join(quote(str(self.postgres_socket_dir), safe="/") for _ in self.postgres_node_ports)
        query = f"?host={sockets}" + ("&target_session_attrs=read-write" if self.POSTGRES == "ha" else "")
        return f"postgresql://postgres:{password}@{hosts}/postgres{query}"

    @property
    def kafka_bootstrap_servers(self) -> str:
        return self.KAFKA_BOOTSTRAP_SERVERS or ",".join(f"127.0.0.1:{port}" for port, _ in self.kafka_node_ports)

    @property
    def kafka_node_ports(self) -> list[tuple[int, int]]:
        """(client port, controller port) of each Kafka node the launcher runs, node 1 first."""
        return [(self.KAFKA_PORT + 2 * n, self.KAFKA_CONTROLLER_PORT + 2 * n) for n in range(self.BROKERS)]

    @property
    def kafka_replication_factor(self) -> int:
        """Copies of every partition: one per node, at most three."""
        return min(self.BROKERS, 3)

    @property
    def kafka_min_insync_replicas(self) -> int:
        """Copies an acks=all write waits for: all but one when replicated, so one node may be away."""
        return max(1, self.kafka_replication_factor - 1)

    def kafka_principal(self, name: str) -> KafkaPrincipal:
        """Kafka principal `name` with its password: the one KAFKA_PASSWORDS sets, else HMAC-SHA256
        of the name under KAFKA_MASTER_PASSWORD, so that a principal's password says nothing of
        another's."""
        if name in self.KAFKA_PASSWORDS:
            return KafkaPrincipal(name, self.KAFKA_PASSWORDS[name])
        digest = hmac.new(self.KAFKA_MASTER_PASSWORD.encode(), name.encode(), hashlib.sha256).hexdigest()
        return KafkaPrincipal(name, digest[:40])

    def database_password(self, database: ServiceDatabase) -> str:
        return str(getattr(self, database.password_variable))

    def service_database_url(self, database: ServiceDatabase) -> str:
        """The URL a service uses: its own role, its own database, on the admin URL's server."""
        return with_credentials(self.admin_database_url, database.role, self.database_password(database), database.name)

    def auditor_database_url(self, database: ServiceDatabase) -> str:
        """The read-only auditor's URL for one service database."""
        return with_credentials(self.admin_database_url, AUDITOR_ROLE, self.AUDITOR_DB_PASSWORD, database.name)

    def relay_database_url(self, database: ServiceDatabase) -> str:
        """The outbox relay's URL for one service database."""
        return with_credentials(self.admin_database_url, RELAY_ROLE, self.OUTBOX_RELAY_DB_PASSWORD, database.name)

    def cdc_password(self, database: ServiceDatabase) -> str:
        """The password of `database`'s replication role: HMAC-SHA256 of the role's name under
        OUTBOX_CDC_DB_PASSWORD, so that one role's password says nothing of another's."""
        digest = hmac.new(self.OUTBOX_CDC_DB_PASSWORD.encode(), database.cdc_role.encode(), hashlib.sha256)
        return digest.hexdigest()[:40]

    @property
    def chaos_panel_url(self) -> str:
        return f"http://{self.CHAOS_PANEL_HOST}:{self.CHAOS_PANEL_PORT}"


def with_credentials(url: str, user: str, password: str, dbname: str) -> str:
    """`url` with its user, password and database replaced; its hosts and ports (one or several,
    as libpq's multi-host URLs list them) and its query kept."""
    parts = urlsplit(url)
    hosts = parts.netloc.rpartition("@")[2] or "127.0.0.1"
    netloc = f"{quote(user, safe='')}:{quote(password, safe='')}@{hosts}"
    return urlunsplit((parts.scheme, netloc, "/" + quote(dbname, safe=""), parts.query, ""))


def with_database(url: str, dbname: str) -> str:
    """`url` to database `dbname`: its user, password, hosts and query kept."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "/" + quote(dbname, safe=""), parts.query, ""))


def over_tcp(url: str) -> str:
    """`url` without a `host` in its query (the launcher's socket directory): libpq then connects
    to the TCP addresses the URL names, as a client must that a TCP proxy stands in front of."""
    parts = urlsplit(url)
    query = [(name, value) for name, value in parse_qsl(parts.query, keep_blank_values=True) if name != "host"]
    return urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(query, safe="/,"), parts.fragment))


def database_hosts(url: str) -> list[tuple[str, int]]:
    """(host, port) of each server a PostgreSQL URL names, in order; 5432 where none is given."""
    listed = urlsplit(url).netloc.rpartition("@")[2]
    found = []
    for each in listed.split(",") if listed else ["127.0.0.1"]:
        host, colon, port = each.rpartition(":")
        if not colon or host.endswith(":") or (each.startswith("[") and not host.endswith("]")):
            host, port = each, ""  # no port: a bare name, or an IPv6 literal alone
        found.append((host.strip("[]") or "127.0.0.1", int(port) if port.isdigit() else 5432))
    return found


def redact(url: str) -> str:
    """`url` with its password hidden, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))
