"""The panel's Kafka node faults, through the nodes' control endpoint, on the panel's one-node
system: the node is shown, frozen and thawed, killed and started again by its supervisor, and the
orders placed around it all end with the auditor green. Bad input is a 400 naming the field."""

from __future__ import annotations

from typing import Any

from tests.e2e.panel.conftest import PanelSystem
from tests.support.waiting import wait_for


def _node(system: PanelSystem) -> dict[str, Any]:
    answer = system.panel.get("/api/brokers").json()
    assert not answer.get("error"), answer
    [node] = answer["nodes"]
    return dict(node)


def test_the_panel_shows_the_node_and_refuses_what_is_not_a_fault(clean: PanelSystem) -> None:
    node = _node(clean)
    assert node["process"] == "kafka" and node["state"] == "RUNNING" and node["controller"] is True
    assert len(node["leads"]) > 0
    page = clean.panel.get("/chaos").text
    assert 'id="kill-leader"' in page and 'id="freeze-node"' in page
    fragment = clean.panel.get("/fragments/brokers").text
    assert "active controller" in fragment and "One node: every fault here is a whole-broker outage" in fragment
    for path, body, named in (
        ("brokers/kill-leader", {"partition": "orders.events/9"}, "partition must be topic/n"),
        ("brokers/kill-leader", {"partition": "dlq.orders-saga-v1/0"}, "partition must be topic/n"),
        ("brokers/kill-leader", {}, "partition is required"),
        ("brokers/freeze", {"node": "two"}, "node must be a number"),
        ("brokers/freeze", {"node": 1, "seconds": 600}, "seconds must be between 1 and 120"),
        ("brokers/freeze", {"node": 2, "seconds": 5}, "there are 1 node(s)"),
    ):
        refused = clean.panel.post(f"/api/{path}", json=body)
        assert refused.status_code == 400, (path, body, refused.text)
        assert named in refused.json()["message"], (path, body, refused.json())


def test_a_frozen_then_killed_broker_comes_back_and_the_orders_around_it_end_once(clean: PanelSystem) -> None:
    before = clean.act("orders")["order_id"]
    assert clean.wait_final(before) in ("CONFIRMED", "REJECTED", "CANCELLED")

    frozen = clean.act("brokers/freeze", node=1, seconds=10)
    assert "SIGSTOP for 10 s" in frozen["message"]
    assert _node(clean)["frozen_seconds_left"] is not None
    again = clean.panel.post("/api/brokers/freeze", json={"node": 1, "seconds": 3})
    assert again.status_code == 409 and "frozen already" in again.json()["message"]
    during = clean.act("orders")["order_id"]  # the API writes its outbox row; the relay waits
    wait_for(lambda: _node(clean)["frozen_seconds_left"] is None, 30, "the node to thaw")
    # Thawed, the node may still be fenced for a moment (its registration lapsed while it was
    # stopped): the partition has no leader until it is unfenced, and there is none to kill.
    wait_for(lambda: "orders.events/0" in _node(clean)["leads"], 60, "the thawed node to lead orders.events/0 again")

    killed = clean.act("brokers/kill-leader", partition="orders.events/0")
    assert "SIGKILL" in killed["message"] and "kafka (node 1)" in killed["message"]
    after = clean.act("orders")["order_id"]
    wait_for(lambda: _node(clean)["state"] == "RUNNING" and len(_node(clean)["leads"]) > 0, 120, "the node back")

    for order_id in (during, after):
        assert clean.wait_final(order_id, timeout=120) in ("CONFIRMED", "REJECTED", "CANCELLED")
    clean.wait_quiet(120)
    verdict = clean.audit()
    assert verdict["green"], verdict["anomalies"]
