"""A downstream refusal for good ends the saga, parks the work with its reason, and a re-drive
after the cause is fixed completes it once: on the running system, through the panel, with the
re-drive clicked in headless Chromium."""

from __future__ import annotations

import httpx
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import WebDriverWait

from tests.e2e.panel.conftest import PanelSystem
from tests.support.browser import SCREENSHOTS, texts_of
from tests.support.waiting import wait_for


def _parked(system: PanelSystem, order_id: str) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = system.panel.get("/api/parked").json()["parked"]
    return [row for row in rows if row["order_id"] == order_id]


def _emails(system: PanelSystem, order_id: str) -> list[dict[str, object]]:
    mail = f"http://127.0.0.1:{system.settings.MAIL_PORT}"
    found: list[dict[str, object]] = httpx.get(f"{mail}/v1/messages", params={"order_id": order_id}).json()
    return found


def _history(system: PanelSystem, order_id: str) -> list[str]:
    api = f"http://127.0.0.1:{system.settings.ORDERS_API_PORT}"
    return [entry["event_type"] for entry in httpx.get(f"{api}/orders/{order_id}").json()["history"]]


def test_an_email_refused_for_good_ends_the_saga_confirmed_and_a_re_drive_sends_it_once(
    clean: PanelSystem, browser: WebDriver
) -> None:
    clean.act("sandbox-faults", sandbox="mail", refusal_rate=1)
    order_id = clean.act("orders", kind="ok")["order_id"]
    assert clean.wait_final(order_id) == "CONFIRMED"
    wait_for(lambda: "NotificationFailed" in _history(clean, order_id), 30, "NotificationFailed in the history")
    clean.wait_for_entry(
        order_id, "the reason", lambda e: e["kind"] == "written" and "refused by the mail service" in e["detail"]
    )
    clean.wait_for_entry(  # told through Kafka, a moment behind the outbox
        order_id, "the refused call", lambda e: e["kind"] == "remote_call" and "HTTP 422" in e["text"]
    )
    [parked] = _parked(clean, order_id)
    assert parked["redrivable"] and "HTTP 422" in str(parked["reason"])
    verdict = clean.audit()
    assert not [a for a in verdict["anomalies"] if a["subject"] == order_id], verdict["anomalies"]
    assert order_id in [p["order_id"] for p in verdict["parked"]]
    assert _emails(clean, order_id) == []

    clean.act("sandbox-faults", sandbox="mail", refusal_rate=0)  # the cause, fixed
    browser.get(f"{clean.url}/parked")
    row = f"//tr[contains(@class, 'parked-row')][.//code[text()='{order_id}']]"
    WebDriverWait(browser, 30).until(lambda d: d.find_elements(By.XPATH, row))
    assert "HTTP 422" in " ".join(texts_of(browser, "tr.parked-row td.reason"))
    browser.save_screenshot(str(SCREENSHOTS / "parked-work.png"))
    browser.find_element(By.XPATH, f"{row}//button[text()='Re-drive']").click()
    WebDriverWait(browser, 30).until(lambda d: "pending again" in " ".join(texts_of(d, "#notice")))

    wait_for(lambda: "NotificationSent" in _history(clean, order_id), 30, "NotificationSent after the re-drive")
    [email] = _emails(clean, order_id)
    assert email["deliveries"] == 1 and email["idempotency_key"] == parked["idempotency_key"]
    assert _parked(clean, order_id) == [] and clean.order_status(order_id) == "CONFIRMED"
    assert not [a for a in clean.audit()["anomalies"] if a["subject"] == order_id]


def test_a_payment_refused_for_good_cancels_the_order_releases_its_stock_and_is_not_re_driven(
    clean: PanelSystem,
) -> None:
    clean.act("sandbox-faults", sandbox="payment-provider", refusal_rate=1)
    order_id = clean.act("orders", kind="ok")["order_id"]
    assert clean.wait_final(order_id) == "CANCELLED"
    clean.wait_for_entry(
        order_id, "the reason", lambda e: e["kind"] == "written" and "refused by the payment provider" in e["detail"]
    )
    wait_for(lambda: "InventoryReleased" in _history(clean, order_id), 30, "the stock released")
    [parked] = _parked(clean, order_id)
    assert not parked["redrivable"] and "cancelled" in str(parked["why_not"])
    refused = clean.panel.post("/api/parked/redrive", json={"process": "payment-executor", "order_id": order_id})
    assert refused.status_code == 409 and "cancelled" in refused.json()["message"]
    assert not [a for a in clean.audit()["anomalies"] if a["subject"] == order_id]
