"""Every control of the panel, through its HTTP API, against a running system of its own."""

from __future__ import annotations

import os
import re
import signal
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from infra.launcher.supervisor import Supervisor
from tests.e2e.panel.conftest import PanelSystem
from tests.support.waiting import wait_for


def _pid(system: PanelSystem, process: str) -> int:
    return int(Supervisor(system.run.state_dir).info(process)["pid"])


def test_place_one_order_and_see_it_with_its_saga_status(clean: PanelSystem) -> None:
    order_id = clean.act("orders", kind="ok")["order_id"]
    assert clean.wait_final(order_id) == "CONFIRMED"
    page = clean.panel.get("/fragments/orders").text
    assert order_id in page and "CONFIRMED" in page


def test_a_load_places_orders_at_a_rate_and_can_be_stopped(clean: PanelSystem) -> None:
    clean.act("load", rate=20, count=10)
    wait_for(lambda: (clean.panel.get("/api/state").json()["load"] or {}).get("placed") == 10, 30, "10 orders placed")
    clean.act("load", rate=5, count=1000)
    clean.act("load/stop")
    wait_for(lambda: not clean.panel.get("/api/state").json()["load"]["running"], 10, "the load to stop")
    assert clean.panel.get("/api/state").json()["load"]["placed"] < 1000


def test_every_running_process_reports_its_fault_points(clean: PanelSystem) -> None:
    processes = {p["name"]: p for p in clean.panel.get("/api/state").json()["processes"]}
    assert all(p["up"] for p in processes.values()), processes
    assert "after_commit_before_ack" in processes["inventory"]["points"]
    assert "relay.after_publish_before_mark" in processes["outbox-relay"]["points"]
    assert "payment.after_provider_call_before_record" in processes["payment-executor"]["points"]
    assert set(processes["inventory"]["actions"]) == {"crash", "raise", "stall", "serialization_failure"}
    http_services = {s["name"]: s for s in clean.panel.get("/api/state").json()["http_services"]}
    assert set(http_services) == {"orders-api", "payment-provider", "mail"}
    assert all(s["up"] and s["restarts"] == 0 for s in http_services.values()), http_services


def test_a_raise_armed_on_payment_rolls_back_and_is_retried(clean: PanelSystem) -> None:
    clean.act("faults", process="payment", point="before_commit", action="raise", times=1)
    assert clean.state("payment")["armed"]["before_commit"]["action"] == "raise"
    order_id = clean.act("orders", kind="ok")["order_id"]
    assert clean.wait_final(order_id) == "CONFIRMED"
    entries = clean.wait_for_entry(
        order_id, "the retried payment", lambda e: e["kind"] == "applied" and e["actor"] == "payment-authorization-v1"
    )
    payment = [e["kind"] for e in entries if e["actor"] == "payment-authorization-v1"]
    assert payment[:2] == ["retryable_failure", "applied"], payment
    assert "InjectedFault" in next(e["detail"] for e in entries if e["kind"] == "retryable_failure")
    assert clean.state("payment")["fired"]["before_commit"] == 1


def test_disarm_takes_an_armed_point_away(clean: PanelSystem) -> None:
    clean.act(
        "faults",
        process="orders-saga",
        point="before_claim",
        action="stall",
        times="always",
        probability=0.5,
        stall_seconds=0.1,
    )
    assert clean.state("orders-saga")["armed"]["before_claim"]["remaining"] is None
    clean.act("faults/disarm", process="orders-saga")
    assert clean.state("orders-saga")["armed"] == {}


def test_bad_fault_requests_are_refused_with_the_reason(clean: PanelSystem) -> None:
    unknown_point = clean.panel.post(
        "/api/faults", json={"process": "inventory", "point": "nowhere", "action": "crash"}
    )
    assert unknown_point.status_code == 400 and "unknown fault point 'nowhere'" in unknown_point.json()["message"]
    unknown_process = clean.panel.post("/api/faults", json={"process": "ghost", "point": "x", "action": "crash"})
    assert unknown_process.status_code == 400 and "no process called 'ghost'" in unknown_process.json()["message"]
    bad_probability = clean.panel.post(
        "/api/faults", json={"process": "inventory", "point": "before_claim", "action": "crash", "probability": 7}
    )
    assert bad_probability.status_code == 400 and "probability" in bad_probability.json()["message"]
    assert clean.state("inventory")["armed"] == {}


def test_forced_serialization_failures_retry_the_whole_transaction(clean: PanelSystem) -> None:
    clean.act("serialization-failures", process="inventory", times=2)
    order_id = clean.act("orders", kind="ok")["order_id"]
    assert clean.wait_final(order_id) == "CONFIRMED"
    entries = clean.wait_for_entry(
        order_id, "inventory applying", lambda e: e["actor"] == "inventory-reservation-v1" and e["kind"] == "applied"
    )
    inventory = [(e["kind"], e["detail"]) for e in entries if e["actor"] == "inventory-reservation-v1"]
    where = inventory[0][1].split("; ")[0]  # the one delivery, retried whole: the same partition and offset
    assert re.fullmatch(r"orders\.events/\d+ @ \d+", where), inventory
    assert inventory[:3] == [
        ("retryable_failure", f"{where}; SerializationFailure"),
        ("retryable_failure", f"{where}; SerializationFailure"),
        ("applied", where),
    ], inventory
    assert clean.audit()["green"]


def test_a_strategy_switch_shows_a_banner_and_survives_a_crash(clean: PanelSystem) -> None:
    clean.act("strategy", process="sales-projection", strategy="no_dedup")
    assert clean.panel.get("/api/state").json()["teaching"] == ["sales-projection"]
    assert "TEACHING STRATEGY ACTIVE" in clean.panel.get("/fragments/banner").text
    before = clean.state("sales-projection")["restarts"]
    os.kill(_pid(clean, "sales-projection"), signal.SIGKILL)
    wait_for(lambda: clean.state("sales-projection")["restarts"] == before + 1, 30, "sales-projection to restart")
    wait_for(lambda: clean.state("sales-projection")["up"], 30, "sales-projection to answer")
    assert clean.state("sales-projection")["strategy"] == "no_dedup"  # stored in its database
    clean.act("strategy", process="sales-projection", strategy="correct")
    assert clean.panel.get("/api/state").json()["teaching"] == []
    assert "TEACHING" not in clean.panel.get("/fragments/banner").text
    refused = clean.panel.post("/api/strategy", json={"process": "sales-projection", "strategy": "yolo"})
    assert refused.status_code == 400 and "strategy: Input should be 'correct'" in refused.json()["message"]


def test_rewinding_a_group_redelivers_everything_as_duplicates(clean: PanelSystem) -> None:
    order_id = clean.act("orders", kind="ok")["order_id"]
    assert clean.wait_final(order_id) == "CONFIRMED"
    # The projection is off the saga's path: it may apply the order after the order's end (later
    # still when a test before restarted it and it waits for its static id).
    clean.wait_for_entry(
        order_id,
        "the sales projection to apply the order's payment",
        lambda e: e["actor"] == "sales-projection-v1" and e["kind"] == "applied",
    )
    before = clean.state("sales-projection")["outcomes"]
    answer = clean.act("rewind", process="sales-projection", to="beginning")
    assert len(answer["partitions"]) == 3 and {p["offset"] for p in answer["partitions"]} == {"beginning"}
    wait_for(
        lambda: clean.state("sales-projection")["outcomes"]["duplicate"] >= before["duplicate"] + before["applied"],
        30,
        "every earlier PaymentAuthorized to come back as a duplicate",
    )
    assert clean.state("sales-projection")["outcomes"]["applied"] == before["applied"]
    future = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    # Nothing is at that time: each partition stays where the member stands, after all it applied
    # (a partition it never had a message of stays at its beginning).
    stays = [p["offset"] for p in clean.act("rewind", process="sales-projection", to=future)["partitions"]]
    standing = [offset for offset in stays if offset != "beginning"]
    assert all(isinstance(offset, int) for offset in standing) and sum(standing) >= before["applied"] > 0, stays
    bad = clean.panel.post("/api/rewind", json={"process": "sales-projection", "to": "yesterday"})
    assert bad.status_code == 400 and "ISO 8601 time, not yesterday" in bad.json()["message"]
    assert clean.audit()["green"]


def test_republishing_with_the_original_id_is_a_duplicate_everywhere(clean: PanelSystem) -> None:
    order_id = clean.act("orders", kind="ok")["order_id"]
    assert clean.wait_final(order_id) == "CONFIRMED"
    placed = next(e for e in clean.timeline(order_id) if e["kind"] == "written" and "OrderPlaced" in e["text"])
    answer = clean.act("republish", message_id=placed["message_id"], copies=1)
    assert answer["order_id"] == order_id
    for consumer in ("inventory-reservation-v1", "orders-saga-v1"):
        clean.wait_for_entry(
            order_id,
            f"{consumer} counting the copy as a duplicate",
            lambda e, c=consumer: (
                e["actor"] == c and e["kind"] == "duplicate" and e["message_id"] == placed["message_id"]
            ),
        )
    missing = clean.panel.post("/api/republish", json={"message_id": "no-such-id"})
    assert missing.status_code == 400 and "no outbox row" in missing.json()["message"]


def test_a_duplicate_storm_is_absorbed_by_the_correct_strategy(clean: PanelSystem) -> None:
    answer = clean.act("storm", copies=15)
    order_id, message_id = answer["order_id"], answer["message_id"]
    assert clean.wait_final(order_id) == "CONFIRMED"

    def inventory_saw_all() -> bool:
        seen = [
            e
            for e in clean.timeline(order_id)
            if e["actor"] == "inventory-reservation-v1" and e["message_id"] == message_id
        ]
        return len(seen) >= 16

    wait_for(inventory_saw_all, 30, "inventory to receive all 16 copies")
    seen = [
        e["kind"]
        for e in clean.timeline(order_id)
        if e["actor"] == "inventory-reservation-v1" and e["message_id"] == message_id
    ]
    assert seen.count("applied") == 1 and seen.count("duplicate") == len(seen) - 1
    assert clean.audit()["green"]


def test_provider_timeout_after_charging_still_charges_once(clean: PanelSystem) -> None:
    answer = clean.act("sandbox-faults", sandbox="payment-provider", timeout_after_charge=1, timeout_seconds=4)
    assert answer["faults"]["timeout_after_charge"] == 1
    order_id = clean.act("orders", kind="ok")["order_id"]
    assert clean.wait_final(order_id, timeout=90) == "CONFIRMED"
    assert clean.panel.get("/api/sandbox-faults/payment-provider").json()["timeout_after_charge"] == 0  # it fired
    assert clean.audit()["green"]  # one charge, though the first answer never arrived
    clean.act("sandbox-faults", sandbox="payment-provider", error_rate="0.5", latency_ms=10, decline_rate=0.1)
    assert clean.panel.get("/api/sandbox-faults/payment-provider").json()["error_rate"] == 0.5
    clean.act("sandbox-faults", sandbox="mail", failure_rate=1)
    assert clean.panel.get("/api/sandbox-faults/mail").json()["failure_rate"] == 1
    bad = clean.panel.post("/api/sandbox-faults", json={"sandbox": "mail", "failure_rate": 3})
    assert bad.status_code == 422 and "422" in bad.json()["message"]
    not_a_number = clean.panel.post("/api/sandbox-faults", json={"sandbox": "mail", "failure_rate": "often"})
    assert not_a_number.status_code == 400 and "failure_rate must be a number" in not_a_number.json()["message"]
    anonymous = httpx.delete(f"http://127.0.0.1:{clean.settings.MAIL_PORT}/admin/faults")
    assert anonymous.status_code == 401, "only the panel, with the sandbox's admin password, changes its faults"
    clean.act("reset")
    assert clean.panel.get("/api/sandbox-faults/mail").json()["failure_rate"] == 0


@pytest.mark.parametrize(
    ("kind", "reason"),
    [
        ("not_json", "undecodable"),
        ("missing_message_id", "missing_message_id"),
        ("unknown_type", "unknown_type"),
        ("oversized", "oversized"),
        ("hostile", "unknown_type"),
    ],
)
def test_poison_is_dead_lettered_with_its_reason_by_every_consumer_of_the_topic(
    clean: PanelSystem, kind: str, reason: str
) -> None:
    key = clean.act("poison", kind=kind, topic="orders.events")["key"]

    def letters() -> list[dict[str, str]]:
        return [d for d in clean.audit()["dead_letters"] if d["key"] == key]

    wait_for(lambda: len(letters()) == 2, 30, f"both consumers of orders.events to dead-letter the {kind} message")
    assert {d["consumer"] for d in letters()} == {"orders-saga-v1", "inventory-reservation-v1"}
    assert {d["reason"] for d in letters()} == {reason}, letters()
    page = clean.panel.get("/dead-letters").text
    assert "<script>alert" not in page and "<img src=x" not in page
    if kind == "hostile":
        assert "&lt;script&gt;alert" in page


def test_reset_disarms_everything_and_restores_every_strategy(system: PanelSystem) -> None:
    system.act("faults", process="inventory", point="before_claim", action="stall", times=5)
    system.act("strategy", process="payment", strategy="memory_dedup_only")
    system.act("sandbox-faults", sandbox="mail", failure_rate=0.5)
    assert system.act("reset")["problems"] == []
    state = system.panel.get("/api/state").json()
    assert state["teaching"] == [] and all(p["armed"] == {} for p in state["processes"])
    assert system.panel.get("/api/sandbox-faults/mail").json()["failure_rate"] == 0


def test_reset_releases_every_held_topic_and_restores_every_horizon(system: PanelSystem) -> None:
    held = system.act("hold", process="orders-saga", topic="orders.events", seconds=300)
    assert held["partitions"] and all(p["held"] for p in held["partitions"])
    shortened = system.act("horizon", process="inventory", seconds=3600)
    assert shortened["seconds"] == 3600 and shortened["configured_seconds"] > 3600
    assert "orders.events" in system.state("orders-saga")["held"]
    assert system.state("inventory")["horizon_seconds"] == 3600
    chaos = system.panel.get("/chaos").text
    assert "orders-saga holds orders.events" in chaos and "inventory: 3600 s" in chaos
    assert system.act("reset")["problems"] == []
    assert system.state("orders-saga")["held"] == {}
    inventory = system.state("inventory")
    assert inventory["horizon_seconds"] == inventory["configured_horizon_seconds"]


@pytest.mark.parametrize(
    ("path", "body", "status", "says"),
    [
        ("hold", {"process": "orders-saga", "topic": "mail.events", "seconds": 5}, 400, "does not consume"),
        ("hold", {"process": "orders-saga", "topic": "orders.events", "seconds": 601}, 400, "between 0 and 600"),
        ("hold", {"process": "orders-saga", "seconds": 5}, 400, "topic is required"),
        ("horizon", {"process": "inventory", "seconds": 0}, 400, "between 1 and"),
        ("horizon", {"process": "outbox-relay", "seconds": 60}, 404, "404"),
        ("redrive", {"location": "garbage"}, 400, "is not a dead letter's place"),
        ("redrive", {"location": "orders.events/0@1"}, 400, "is not a dead-letter topic"),
        ("redrive", {"location": "dlq.inventory-reservation-v1/0@999999"}, 400, "no dead letter could be read"),
    ],
)
def test_hold_horizon_and_redrive_refuse_bad_requests_with_the_reason(
    system: PanelSystem, path: str, body: dict[str, object], status: int, says: str
) -> None:
    answer = system.panel.post(f"/api/{path}", json=body)
    assert answer.status_code == status and says in answer.json()["message"], answer.text


def test_orders_and_audit_queries_check_their_parameters(clean: PanelSystem) -> None:
    order_id = clean.act("orders", kind="ok")["order_id"]
    clean.wait_final(order_id)
    listed = clean.panel.get("/api/orders", params={"limit": 5}).json()["orders"]
    assert listed[0]["order_id"] == order_id and listed[0]["idle_seconds"] >= 0
    order = clean.panel.get(f"/api/orders/{order_id}").json()
    assert order["status"] == "CONFIRMED" and order["events"][0]["event_type"] == "OrderPlaced"
    assert "customer_email" not in str(order) and "payload" not in str(order)
    assert clean.panel.get("/api/orders", params={"limit": 0}).status_code == 400
    assert clean.panel.get("/api/orders/no-such-order").status_code == 404
    assert clean.panel.get("/api/sandbox-faults/bank").status_code == 404
    assert clean.panel.get("/api/audit", params={"stuck_after": 0}).status_code == 400


def test_pages_show_no_secret_and_no_payload(clean: PanelSystem) -> None:
    order_id = clean.act("orders", kind="ok")["order_id"]
    clean.wait_final(order_id)
    secrets = [clean.settings.POSTGRES_PASSWORD, clean.settings.AUDITOR_DB_PASSWORD, "@example.com", "customer_email"]
    for path in (
        "/",
        "/orders",
        "/chaos",
        "/dead-letters",
        f"/orders/{order_id}",
        "/fragments/verdict",
        "/fragments/processes",
        "/fragments/orders",
        f"/fragments/timeline/{order_id}",
    ):
        page = clean.panel.get(path).text
        for secret in secrets:
            assert secret not in page, f"{secret!r} shown on {path}"


def test_cross_site_and_tokenless_form_posts_are_refused(clean: PanelSystem) -> None:
    cross_site = clean.panel.post(
        "/api/faults/disarm", json={"process": "inventory"}, headers={"Origin": "http://evil.example"}
    )
    assert cross_site.status_code == 403 and "another site" in cross_site.json()["detail"]
    with httpx.Client(base_url=clean.url) as browser_like:
        form_without_csrf = browser_like.post("/api/faults/disarm", data={"process": "inventory"})
        assert form_without_csrf.status_code == 403 and "CSRF" in form_without_csrf.json()["detail"]
        browser_like.get("/chaos")  # the page sets the CSRF cookie
        csrf = browser_like.cookies["eo_csrf"]
        form = browser_like.post("/api/faults/disarm", data={"process": "inventory", "csrf_token": csrf})
        assert form.status_code == 200 and form.json()["ok"]
        stale = browser_like.post("/api/faults/disarm", data={"process": "inventory", "csrf_token": "forged"})
        assert stale.status_code == 403
