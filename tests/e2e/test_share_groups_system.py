"""`make up SHARE_GROUPS=on` (a system of its own): the sales projection and the notification
dispatch consume as share groups of four members each over three partitions; orders go to their
ends with the auditor green; a record whose lock expires under a stalled projection member is
applied by another member and counted a duplicate by the first; the workshop's lock-expiry lab
runs on it; a rewind of a share group is refused with its reason; and a short soak on it loses
and doubles nothing."""

from __future__ import annotations

import re
from collections.abc import Iterator
from functools import partial

import httpx
import pytest
from selenium.webdriver.remote.webdriver import WebDriver

from auditor.invariants import audit, database_reader, report
from infra.launcher.processes import control_urls
from labs.catalog import BY_NAME
from labs.client import PanelClient
from services.orders.load import place_orders
from services.settings import PROJECT_ROOT, Settings
from services.topology import TOPIC_PARTITIONS, database
from tests.support.launcher_run import LauncherRun, running_system
from tests.support.scraped import metric
from tests.support.waiting import wait_for
from tests.support.workshop import run_and_screenshot

FINAL = {"CONFIRMED", "REJECTED", "CANCELLED"}
SHARE_PROCESSES = {"sales-projection": "sales-projection-v1", "notification": "notification-dispatch-v1"}
MEMBERS = 4


LOCK_SECONDS = 2
"""The share groups' record lock on this system: a stall past it is quick to stage."""
LOG = PROJECT_ROOT / "artifacts" / "soak" / "share-groups-soak.log"


@pytest.fixture(scope="module")
def running() -> Iterator[LauncherRun]:
    with running_system(SHARE_GROUPS="on", SHARE_MEMBERS=str(MEMBERS), SHARE_LOCK_SECONDS=str(LOCK_SECONDS)) as run:
        yield run


@pytest.fixture(scope="module")
def system(running: LauncherRun) -> Settings:
    """The system once both share groups consume: each has applied the first order's payment (a
    fresh cluster creates the share coordinator's state topic and initializes each share group's
    partitions on its first member's join; a busy machine takes a while)."""
    settings = running.settings()
    for process in SHARE_PROCESSES:
        wait_for(
            partial(lambda p: _members(settings, p) == MEMBERS, process),
            60,
            f"{process}'s {MEMBERS} share-group members to consume",
        )
    for seed in range(40, 50):  # an order the payment refuses gives them nothing to apply
        _place_and_finish(settings, 1, seed=seed)
        if all(_outcomes(settings, process, "applied") for process in SHARE_PROCESSES):
            break
    wait_for(
        lambda: all(_outcomes(settings, process, "applied") for process in SHARE_PROCESSES),
        180,
        "both share groups to apply their first payment",
        interval=0.5,
    )
    return settings


def _place_and_finish(settings: Settings, count: int, seed: int) -> list[str]:
    api = f"http://127.0.0.1:{settings.ORDERS_API_PORT}"
    placed = place_orders(api, rate=20, count=count, seed=seed, quiet=True)
    assert not placed.failures and len(placed.order_ids) == count
    with httpx.Client(base_url=api, timeout=10) as client:
        wait_for(
            lambda: all(client.get(f"/orders/{o}").json()["status"] in FINAL for o in placed.order_ids),
            180,
            f"all {count} orders to reach a final status",
            interval=0.5,
        )
    return placed.order_ids


def _audit_is_clean(settings: Settings) -> None:
    verdict = audit(database_reader(lambda name: settings.auditor_database_url(database(name))))
    assert verdict.green, "\n".join(report(verdict))


def _members(settings: Settings, process: str) -> float:
    return metric(settings, process, "eo_consumer_share_members", consumer=SHARE_PROCESSES[process])


def _outcomes(settings: Settings, process: str, outcome: str) -> float:
    return metric(settings, process, "eo_consumer_messages_total", consumer=SHARE_PROCESSES[process], outcome=outcome)


def test_more_share_members_than_partitions_take_the_orders_to_their_ends(system: Settings) -> None:
    assert MEMBERS > TOPIC_PARTITIONS
    assert all(_members(system, process) == MEMBERS for process in SHARE_PROCESSES)
    applied = {process: _outcomes(system, process, "applied") for process in SHARE_PROCESSES}
    _place_and_finish(system, 40, seed=21)
    for process in SHARE_PROCESSES:
        wait_for(
            partial(lambda p: _outcomes(system, p, "applied") > applied[p], process),
            60,
            f"{process} to apply the new orders' payments",
        )
    _audit_is_clean(system)


def test_a_lock_that_expired_under_a_stalled_member_gives_one_effect_and_one_duplicate(system: Settings) -> None:
    duplicates = _outcomes(system, "sales-projection", "duplicate")
    # The first projection member to reach a claim stalls there past the record's lock, once.
    faults = f"{control_urls(system)['sales-projection']}/faults"
    armed = httpx.post(
        faults,
        json={"point": "before_claim", "action": "stall", "times": 1, "stall_seconds": 3 * LOCK_SECONDS},
        timeout=5,
    )
    assert armed.status_code == 200, armed.text
    for seed in range(22, 32):  # an order the payment refuses gives the projection nothing to claim
        _place_and_finish(system, 1, seed=seed)
        if httpx.get(faults, timeout=5).json()["fired"].get("before_claim"):
            break
    wait_for(
        lambda: _outcomes(system, "sales-projection", "duplicate") == duplicates + 1,
        30,
        "the stalled member to find the marker taken",
    )
    consumer = SHARE_PROCESSES["sales-projection"]
    assert metric(system, "sales-projection", "eo_consumer_share_redeliveries_total", consumer=consumer) >= 1
    _audit_is_clean(system)


def test_the_lock_expiry_lab(system: Settings, browser: WebDriver) -> None:
    """The workshop's lab on this system, as `make lab NAME=lock-expiry` runs it, with its
    screenshot (tests/support/workshop.py): one row and one duplicate."""
    panel = PanelClient(system.chaos_panel_url)
    try:
        run_and_screenshot(BY_NAME["lock-expiry"], panel, browser)
    finally:
        panel.close()


def test_a_share_group_refuses_a_rewind_with_its_reason(system: Settings) -> None:
    refused = httpx.post(f"{control_urls(system)['sales-projection']}/rewind", json={"to": "beginning"}, timeout=10)
    assert refused.status_code == 409 and "share group" in refused.text, refused.text


@pytest.mark.timeout(600)
def test_a_short_soak_on_share_groups_loses_nothing_and_doubles_nothing(running: LauncherRun) -> None:
    """Every process crashed at every point (the share members too), the broker and the database
    restarted, copies republished; the consumer groups rewound, and in place of a rewind each share
    group has a record held past its lock."""
    exit_status, output = running.soak(LOG, "--duration", "50", "--rate", "5", "--crashes", "0", "--seed", "3")
    assert exit_status == 0 and "SOAK: PASSED" in output, output
    assert re.search(r"^\s*not carried out\s+none$", output, re.M), output
    injected = re.search(r"faults injected\s+(.*)$", output, re.M)
    assert injected and f"lock expiry {len(SHARE_PROCESSES)}" in injected.group(1), output
    assert "CHECKER: CLEAN" in output and "auditor and checker      agree" in output, output
