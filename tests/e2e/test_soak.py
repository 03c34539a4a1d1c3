"""The short soak: two minutes of orders under the whole chaos schedule on a system of its own,
with two instances of every consumer and of the relay, on three Kafka nodes and a PostgreSQL
primary with a synchronous standby: partition leaders killed, a node frozen, the active
controller restarted, the primary SIGKILLed twice and its standby promoted, and nothing lost or
doubled at the end, by the auditor's reading (Kafka's side too) and by the history checker's.
Then lab 17 on the same system: with the standby made asynchronous and left behind, a failover
loses work Kafka had acknowledged, and a rewind applies it once."""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest
from selenium.webdriver.remote.webdriver import WebDriver

from labs.catalog import BY_NAME
from labs.client import PanelClient
from services.settings import PROJECT_ROOT
from services.topology import TOPIC_PARTITIONS, all_topics
from tests.support.launcher_run import LauncherRun, running_system
from tests.support.workshop import run_and_screenshot

LOG = PROJECT_ROOT / "artifacts" / "soak" / "short-soak.log"


def _figure(output: str, label: str) -> int:
    found = re.search(rf"^\s*{label}\s+(\d+)", output, re.M)
    assert found, f"no {label!r} in:\n{output}"
    return int(found.group(1))


@pytest.fixture(scope="module")
def system() -> Iterator[LauncherRun]:
    with running_system(REPLICAS="2", BROKERS="3", POSTGRES="ha") as run:
        yield run


@pytest.mark.timeout(900)
def test_a_short_soak_with_two_replicas_under_every_kind_of_fault_loses_nothing_and_doubles_nothing(
    system: LauncherRun,
) -> None:
    run = system
    status = run.launcher("status").stdout
    assert "inventory-2" in status and "kafka-3" in status
    # One pass over every point (a longer soak makes more): the count stays within CI's time.
    exit_status, output = run.soak(LOG, "--duration", "80", "--rate", "6", "--crashes", "0", "--seed", "5")
    shown = run.launcher("broker")  # `make broker`: the nodes, who leads what, the controller
    refused = run.launcher("broker", "kill-leader", "no-partition")
    panel = httpx.get(f"http://127.0.0.1:{run.settings().CHAOS_PANEL_PORT}/api/brokers", timeout=30).json()
    assert [node["process"] for node in panel["nodes"]] == ["kafka-1", "kafka-2", "kafka-3"], panel
    assert panel["replicated"] and sum(node["controller"] for node in panel["nodes"]) == 1, panel
    assert shown.returncode == 0, shown.stdout + shown.stderr
    nodes = [line for line in shown.stdout.splitlines() if line.strip().startswith("kafka-")]
    assert len(nodes) == 3 and all("RUNNING" in line for line in nodes), shown.stdout
    assert sum("active controller" in line for line in nodes) == 1, shown.stdout
    led = sum(int(line.split("leads ")[1].split(":")[0]) for line in nodes)
    assert led == len(all_topics()) * TOPIC_PARTITIONS, shown.stdout
    assert refused.returncode == 2 and "topic/number" in refused.stderr, refused.stderr
    shown_pair = run.launcher("db")  # `make db`: both nodes, and the failovers the soak made
    assert exit_status == 0 and "SOAK: PASSED" in output, output + shown_pair.stdout + shown_pair.stderr
    injected = re.search(r"faults injected\s+(.*)$", output, re.M)
    assert injected
    assert re.search(r"^\s*not carried out\s+none$", output, re.M), output
    for kind in (
        "crash",
        "rewind",
        "republish",
        "leader kill 2",
        "broker freeze 1",
        "controller restart 1",
        "postgres failover 2",
        "provider timeout",
    ):
        assert kind in injected.group(1), injected.group(1)
    assert _figure(output, "orders placed") > 300
    assert _figure(output, "crashes that fired") >= 15
    assert _figure(output, "duplicates absorbed") > 0
    assert _figure(output, "anomalies") == 0 and _figure(output, "orders not terminal") == 0
    # The independent checker read the soak's history and agrees with the auditor.
    assert "CHECKER: CLEAN" in output and "auditor and checker      agree" in output, output
    assert "KAFKA SIDE: CLEAN" in output, output
    assert shown_pair.returncode == 0 and "a primary and a synchronous standby" in shown_pair.stdout, shown_pair.stdout
    # Two failovers, and one more for each tried again after its rebuild had not finished.
    failovers = shown_pair.stdout.count("failover at ")
    assert failovers == 2 + shown_pair.stdout.count("not rebuilt yet"), shown_pair.stdout
    nothing = run.launcher("db", "rewind")
    assert nothing.returncode == 0 and "nothing to rewind for" in nothing.stdout, nothing.stdout + nothing.stderr


@pytest.mark.timeout(600)
def test_an_asynchronous_standby_loses_acknowledged_work_and_a_rewind_applies_it_once(
    system: LauncherRun, browser: WebDriver
) -> None:
    """Lab 17, run as `make lab NAME=failover` runs it, on the soak's system (two replicas of every
    consumer: inventory's hold covers both); the page it points at is screenshotted."""
    panel = PanelClient(f"http://127.0.0.1:{system.settings().CHAOS_PANEL_PORT}")
    try:
        run_and_screenshot(BY_NAME["failover"], panel, browser)
        mode = panel.databases()["synchronous"]
    finally:
        panel.close()
    assert mode is True, "the lab leaves the pair synchronous, as it found it"
