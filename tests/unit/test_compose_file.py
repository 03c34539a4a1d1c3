"""docker-compose.yml names the same services, ports and variables as the native launcher.

No Docker engine runs on these machines, so this is what can be checked of it here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from infra.launcher import processes, prometheus_server
from infra.launcher.supervisor import Program
from services.kafka_access import PRINCIPALS
from services.settings import PROJECT_ROOT, Settings

COMPOSE = PROJECT_ROOT / "docker-compose.yml"
SECURITY_KEYS = {
    "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP",
    "KAFKA_AUTHORIZER_CLASS_NAME",
    "KAFKA_SUPER_USERS",
    "KAFKA_ALLOW_EVERYONE_IF_NO_ACL_FOUND",
}
NATIVE_ONLY_VARIABLES = {"PYTHONPATH", "PYTHONUNBUFFERED", "EO_RUN_ID", "BROKER_CONTROL_URL"}
COMPOSE_ONLY_VARIABLES = {"CHAOS_PANEL_TOKEN", "GRAFANA_URL", "ALLOWED_HOSTS"}
"""Inside its container the panel listens beyond loopback, so compose hands it the token (or none,
and it makes one up); natively it listens on loopback and needs none unless the user sets one.
Likewise compose names its services in ALLOWED_HOSTS; natively loopback needs no name (the launcher
passes it on when the user sets one)."""


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(loaded, dict)
    return loaded


def _native_platform() -> list[Program]:
    """The native platform's programs that compose runs too: not the Kafka nodes' control
    endpoint, which acts on the nodes through the native supervisor."""
    programs = processes.platform_programs(Settings(DATABASE_URL=None, KAFKA_BOOTSTRAP_SERVERS=None))
    return [program for program in programs if program.name != processes.BROKER_CONTROL]


def test_compose_runs_the_same_services_as_the_native_path_plus_grafana(
    compose: dict[str, Any],
) -> None:
    native = {processes.POSTGRES, processes.KAFKA} | {p.name for p in _native_platform()}
    assert native <= set(compose["services"])
    assert {"prometheus", "grafana"} <= set(compose["services"])


def test_every_long_running_service_has_a_health_check_and_a_restart_policy(
    compose: dict[str, Any],
) -> None:
    for name, service in compose["services"].items():
        assert service.get("restart") in ("unless-stopped", "always", "on-failure"), name
        if name != "provision":
            assert "healthcheck" in service, name


def test_platform_services_read_the_same_variables_as_their_native_processes(
    compose: dict[str, Any],
) -> None:
    for program in _native_platform():
        if program.name == processes.PROMETHEUS:  # not a Python process: configured by its file
            continue
        compose_variables = set(compose["services"][program.name]["environment"]) - COMPOSE_ONLY_VARIABLES
        assert compose_variables == set(program.environment) - NATIVE_ONLY_VARIABLES, program.name


def test_published_ports_default_to_the_native_ports(compose: dict[str, Any]) -> None:
    defaults = Settings(DATABASE_URL=None, KAFKA_BOOTSTRAP_SERVERS=None)
    expected = {
        "postgres": ("POSTGRES_PORT", defaults.POSTGRES_PORT),
        "kafka": ("KAFKA_PORT", defaults.KAFKA_PORT),
        "chaos-panel": ("CHAOS_PANEL_PORT", defaults.CHAOS_PANEL_PORT),
        "orders-api": ("ORDERS_API_PORT", defaults.ORDERS_API_PORT),
        "payment-provider": ("PAYMENT_PROVIDER_PORT", defaults.PAYMENT_PROVIDER_PORT),
        "mail": ("MAIL_PORT", defaults.MAIL_PORT),
        "prometheus": ("PROMETHEUS_PORT", defaults.PROMETHEUS_PORT),
    }
    for service, (variable, port) in expected.items():
        published = compose["services"][service]["ports"][0]
        assert re.search(rf"\$\{{{variable}:-{port}\}}:", published), (service, published)


def test_the_kafka_image_is_the_version_the_native_path_fetches(compose: dict[str, Any]) -> None:
    pom = (PROJECT_ROOT / "infra" / "kafka" / "pom.xml").read_text()
    version = re.search(r"<kafka.version>([^<]+)</kafka.version>", pom)
    assert version
    assert compose["services"]["kafka"]["image"] == f"apache/kafka:{version.group(1)}"


def test_the_grafana_image_matches_the_pinned_dashboard_sdk(compose: dict[str, Any]) -> None:
    pyproject = (PROJECT_ROOT / "pyproject.toml").read_text()
    sdk = re.search(r"grafana-foundation-sdk==\d+!(\d+\.\d+)\.\d+", pyproject)
    assert sdk
    assert compose["services"]["grafana"]["image"].startswith(f"grafana/grafana:{sdk.group(1)}.")


def test_the_relay_serves_the_same_databases_in_both_paths(compose: dict[str, Any]) -> None:
    native = next(p for p in _native_platform() if p.name == processes.OUTBOX_RELAY)
    native_databases = set(json.loads(native.environment["OUTBOX_DATABASE_URLS"]))
    compose_urls = compose["services"]["outbox-relay"]["environment"]["OUTBOX_DATABASE_URLS"]
    compose_databases = set(json.loads(re.sub(r"\$\{[^}]*\}", "x", compose_urls)))
    assert compose_databases == native_databases


def test_every_setting_is_listed_in_env_example() -> None:
    listed = set(re.findall(r"^#?\s*([A-Z_]+)=", (PROJECT_ROOT / ".env.example").read_text(), re.M))
    assert set(Settings.model_fields) <= listed


def test_every_mounted_file_exists(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (PROJECT_ROOT / source).exists(), (name, source)
    assert Path(PROJECT_ROOT / "Dockerfile").exists()


def test_the_panel_reaches_the_same_processes_on_the_same_ports_in_both_paths(compose: dict[str, Any]) -> None:
    native = processes.control_urls(Settings(DATABASE_URL=None, KAFKA_BOOTSTRAP_SERVERS=None))
    in_compose = json.loads(compose["services"]["chaos-panel"]["environment"]["CONTROL_URLS"])
    assert set(in_compose) == set(native)
    for name, url in in_compose.items():
        assert url == f"http://{name}:{native[name].rsplit(':', 1)[1]}", name
        assert compose["services"][name]["environment"]["CONTROL_PORT"] == int(native[name].rsplit(":", 1)[1])


def test_consumers_run_as_many_group_members_in_both_paths(compose: dict[str, Any]) -> None:
    for program in _native_platform():
        if program.name == processes.PROMETHEUS:
            continue
        members = program.environment.get("CONSUMER_MEMBERS")
        assert str(compose["services"][program.name]["environment"].get("CONSUMER_MEMBERS")) == str(members), (
            program.name
        )


def test_both_prometheus_configurations_scrape_the_same_processes_on_the_same_ports() -> None:
    settings = Settings(DATABASE_URL=None, KAFKA_BOOTSTRAP_SERVERS=None)
    native = prometheus_server.configuration(settings, processes.scrape_targets(settings))
    in_compose = yaml.safe_load((PROJECT_ROOT / "infra" / "prometheus" / "prometheus.compose.yml").read_text())

    def targets(configuration: Any) -> dict[str, str]:
        (job,) = configuration["scrape_configs"]
        return {c["labels"]["process"]: c["targets"][0].rsplit(":", 1)[1] for c in job["static_configs"]}

    assert targets(in_compose) == targets(native)
    assert native["rule_files"] == [str(prometheus_server.ALERTS)]  # the file compose mounts there:
    assert in_compose["rule_files"] == ["/etc/prometheus/alerts.yml"]
    mounts = yaml.safe_load(COMPOSE.read_text())["services"]["prometheus"]["volumes"]
    assert "./infra/prometheus/alerts.yml:/etc/prometheus/alerts.yml:ro" in mounts
    for static in in_compose["scrape_configs"][0]["static_configs"]:
        assert static["targets"][0].split(":")[0] == static["labels"]["process"]  # the compose service's name


def test_the_image_holds_every_package_the_processes_import() -> None:
    """Every package of this repository that the image's processes (services/, infra/,
    outbox_relay/, chaos_panel/, auditor/) import, found by reading their imports, is copied
    into the image."""
    dockerfile = (PROJECT_ROOT / "Dockerfile").read_text()
    ours = {path.parent.name for path in PROJECT_ROOT.glob("*/__init__.py")}
    imported = {"services", "infra", "outbox_relay", "chaos_panel", "auditor"}
    for folder in ("services", "infra", "outbox_relay", "chaos_panel", "auditor"):
        for source in (PROJECT_ROOT / folder).rglob("*.py"):
            imported |= set(re.findall(r"^\s*(?:from|import) (\w+)", source.read_text(), re.M)) & ours
    assert {"effectively_once", "dashboards", "labs"} <= imported
    for package in sorted(imported):
        assert re.search(rf"^COPY {package} \./{package}$", dockerfile, re.M), package
    # The runtime goes into the image as an installed wheel, its source removed after.
    assert re.search(r"^RUN uv sync --frozen --no-dev --no-editable && rm -rf effectively_once$", dockerfile, re.M)


def test_scaled_consumers_get_a_static_membership_id_per_container(compose: dict[str, Any]) -> None:
    for name in ("orders-saga", "inventory", "payment", "notification", "sales-projection"):
        assert "{hostname}" in compose["services"][name]["environment"]["EO_INSTANCE_ID"], name


def test_the_launcher_passes_allowed_hosts_on_when_the_user_sets_them() -> None:
    named = processes.platform_programs(
        Settings(DATABASE_URL=None, KAFKA_BOOTSTRAP_SERVERS=None, ALLOWED_HOSTS="panel.example.org")
    )
    assert all(
        p.environment.get("ALLOWED_HOSTS") == "panel.example.org" for p in named if p.name != processes.PROMETHEUS
    )


@pytest.mark.parametrize("implementation", ["java", "node"])
def test_each_inventory_implementation_has_a_compose_file_that_replaces_only_how_inventory_runs(
    compose: dict[str, Any], implementation: str
) -> None:
    """`make up INVENTORY_IMPL=…` with a Docker engine lays infra/compose/inventory-….yml over the base:
    it changes the image, the command and the health check of `inventory`, and nothing else, so the
    database role, topics, control port and restart policy stay those of the inventory slot."""
    override = yaml.safe_load((PROJECT_ROOT / "infra" / "compose" / f"inventory-{implementation}.yml").read_text())
    assert set(override["services"]) == {"inventory"}
    inventory = override["services"]["inventory"]
    assert set(inventory) == {"build", "image", "command", "healthcheck"}
    assert inventory["command"] == []  # the image's ENTRYPOINT runs the consumer
    context = PROJECT_ROOT / inventory["build"]
    dockerfile = (context / "Dockerfile").read_text()
    assert "ENTRYPOINT" in dockerfile
    port = str(compose["services"]["inventory"]["environment"]["CONTROL_PORT"])
    assert any(f":{port}/metrics" in part for part in inventory["healthcheck"]["test"])
    makefile = (PROJECT_ROOT / "Makefile").read_text()
    assert "infra/compose/inventory-$(INVENTORY_IMPL).yml" in makefile


def test_three_brokers_in_compose_form_one_replicated_quorum_like_the_native_cluster() -> None:
    """`make up BROKERS=3` with a Docker engine lays infra/compose/brokers-3.yml over the base: three
    nodes of one cluster, each in the quorum, with the native cluster's replication settings."""
    override = yaml.safe_load((PROJECT_ROOT / "infra" / "compose" / "brokers-3.yml").read_text())
    nodes = {name: override["services"][name]["environment"] for name in ("kafka", "kafka-2", "kafka-3")}
    assert sorted(int(env["KAFKA_NODE_ID"]) for env in nodes.values()) == [1, 2, 3]
    assert len({env["CLUSTER_ID"] for env in nodes.values()}) == 1
    voters = {env["KAFKA_CONTROLLER_QUORUM_VOTERS"] for env in nodes.values()}
    assert voters == {"1@kafka:9093,2@kafka-2:9093,3@kafka-3:9093"}
    native = Settings(BROKERS=3)
    for env in nodes.values():
        assert int(env["KAFKA_DEFAULT_REPLICATION_FACTOR"]) == native.kafka_replication_factor
        assert int(env["KAFKA_MIN_INSYNC_REPLICAS"]) == native.kafka_min_insync_replicas
        assert env["KAFKA_UNCLEAN_LEADER_ELECTION_ENABLE"] == "false"
    assert override["services"]["kafka-2"]["image"] == override["services"]["kafka-3"]["image"]
    makefile = (PROJECT_ROOT / "Makefile").read_text()
    assert "-f infra/compose/brokers-3.yml" in makefile and "kafka-3:19092" in makefile
    base = yaml.safe_load(COMPOSE.read_text())
    assert "COMPOSE_KAFKA_BOOTSTRAP" in base["x-platform-environment"]["KAFKA_BOOTSTRAP_SERVERS"]


def test_each_service_is_the_same_kafka_principal_in_both_paths(compose: dict[str, Any]) -> None:
    for program in _native_platform():
        if program.name == processes.PROMETHEUS:
            continue
        in_compose = compose["services"][program.name]["environment"]
        assert in_compose["KAFKA_USERNAME"] == program.environment["KAFKA_USERNAME"], program.name


def test_provisioning_gives_each_principal_the_password_its_service_connects_with(compose: dict[str, Any]) -> None:
    provision = compose["services"]["provision"]["environment"]
    passwords = json.loads(provision["KAFKA_PASSWORDS"])
    assert set(passwords) == {principal.name for principal in PRINCIPALS}
    for name, service in compose["services"].items():
        user = service.get("environment", {}).get("KAFKA_USERNAME")
        if user and name != "provision":
            assert service["environment"]["KAFKA_PASSWORD"] == passwords[user], name
            assert re.fullmatch(r"\$\{KAFKA_PASSWORD_[A-Z0-9_]+:-[a-z0-9-]+-dev-password\}", passwords[user]), user
    assert (provision["KAFKA_USERNAME"], provision["KAFKA_SASL_MECHANISM"]) == ("admin", "PLAIN")


def test_every_kafka_node_authenticates_and_authorizes_in_both_files(compose: dict[str, Any]) -> None:
    replicated = yaml.safe_load((PROJECT_ROOT / "infra" / "compose" / "brokers-3.yml").read_text())
    base = compose["services"]["kafka"]["environment"]
    security = {key: value for key, value in base.items() if "SASL" in key or key in SECURITY_KEYS}
    assert security["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"].count("SASL_PLAINTEXT") == 3
    assert "PLAINTEXT:PLAINTEXT" not in security["KAFKA_LISTENER_SECURITY_PROTOCOL_MAP"]
    assert security["KAFKA_ALLOW_EVERYONE_IF_NO_ACL_FOUND"] == "false"
    for name in ("kafka", "kafka-2", "kafka-3"):
        node = replicated["services"][name]["environment"]
        assert {key: node[key] for key in security} == security, name
    for service in (compose["services"]["kafka"], replicated["services"]["kafka-2"]):
        assert "--command-config" in service["healthcheck"]["test"][1]


def test_debezium_in_compose_runs_the_native_paths_worker_and_marks_like_it() -> None:
    """`make up RELAY=debezium` with a Docker engine lays infra/compose/relay-debezium.yml over the
    base: provisioning makes the slots, a container of the image's `connect` target renders and
    runs the same worker as the native path, and the relay marks what the same slots confirmed."""
    override = yaml.safe_load((PROJECT_ROOT / "infra" / "compose" / "relay-debezium.yml").read_text())
    base = yaml.safe_load(COMPOSE.read_text())
    assert override["services"]["provision"]["environment"]["RELAY"] == "debezium"
    connect = override["services"]["kafka-connect"]
    assert connect["build"] == {"context": ".", "target": "connect"}
    assert connect["command"][:4] == ["python", "-m", "outbox_relay", "connect-worker"]
    dockerfile = (PROJECT_ROOT / "Dockerfile").read_text()
    assert "AS connect" in dockerfile and "outbox_relay/debezium/pom.xml" in dockerfile
    assert "/opt/connect-jars" in dockerfile and "/opt/connect-jars" in connect["command"]
    assert "mkdir -p /connect-offsets && chown nobody /connect-offsets" in dockerfile  # the volume is writable
    assert any(volume.startswith("connect-offsets:") for volume in connect["volumes"])
    assert f"{Settings().KAFKA_CONNECT_PORT}/connectors" in connect["healthcheck"]["test"][-1]
    native_relay = next(
        p for p in processes.platform_programs(Settings(RELAY="debezium")) if p.name == processes.OUTBOX_RELAY
    )
    compose_slots = json.loads(override["services"]["outbox-relay"]["environment"]["RELAY_CDC_SLOTS"])
    assert compose_slots == json.loads(native_relay.environment["RELAY_CDC_SLOTS"])
    assert "wal_level=logical" in base["services"]["postgres"]["command"]
    native_panel = next(
        p for p in processes.platform_programs(Settings(RELAY="debezium")) if p.name == processes.CHAOS_PANEL
    )
    panel_url = override["services"]["chaos-panel"]["environment"]["KAFKA_CONNECT_URL"]
    assert panel_url.rsplit(":", 1)[1] == native_panel.environment["KAFKA_CONNECT_URL"].rsplit(":", 1)[1]
    assert connect["command"][-2:] == ["--rest-host", "0.0.0.0"]  # the panel's container reaches it
    assert base["services"]["provision"]["environment"]["RELAY"] == "${RELAY:-builtin}"
    makefile = (PROJECT_ROOT / "Makefile").read_text()
    assert "-f infra/compose/relay-debezium.yml" in makefile


def test_a_postgres_pair_in_compose_streams_to_a_standby_that_every_service_can_reach() -> None:
    """`make up POSTGRES=ha` with a Docker engine: every database URL is written so that the pair's
    overlay can name both nodes (and only a read-write one), the standby runs the primary's image
    and settings, and what it mounts exists."""
    text = COMPOSE.read_text()
    urls = re.findall(r"postgresql://[^\s\"']+", text)
    assert urls and all(
        "@${COMPOSE_POSTGRES_HOSTS:-postgres:5432}/" in url and url.endswith("${COMPOSE_POSTGRES_QUERY:-}")
        for url in urls
    ), urls
    base = yaml.safe_load(text)["services"]["postgres"]
    pair = yaml.safe_load((PROJECT_ROOT / "infra/compose/postgres-ha.yml").read_text())["services"]
    standby = pair["postgres-standby"]
    assert standby["image"] == base["image"] and standby["command"] == pair["postgres"]["command"]
    assert all(part in pair["postgres"]["command"] for part in base["command"])
    assert any(part.startswith("synchronous_standby_names=") for part in pair["postgres"]["command"])
    for volume in standby["volumes"] + pair["postgres"]["volumes"]:
        source = volume.split(":")[0]
        assert not source.startswith("./") or (PROJECT_ROOT / source).exists(), source
    makefile = (PROJECT_ROOT / "Makefile").read_text()
    assert "COMPOSE_POSTGRES_HOSTS=postgres:5432,postgres-standby:5432" in makefile
    assert "-f infra/compose/postgres-ha.yml" in makefile
