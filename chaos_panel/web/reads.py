"""The panel's reads: GET /api/…, the same figures its pages show, as JSON (the actions, POST
/api/…, are actions.py's). Each takes the panel through `Depends` (dependencies.py)."""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, HTTPException
from pydantic import BaseModel

from auditor import kafka_side
from auditor.dead_letters import DeadLetter, read_dead_letters
from auditor.invariants import Anomaly, Parked
from chaos_panel.acting.control_endpoints import ControlError
from chaos_panel.domain import proof
from chaos_panel.drawing import system_map
from chaos_panel.reading import map_readings, proof_facts, records
from chaos_panel.web.dependencies import PanelDep
from chaos_panel.web.pages import timeline_of

router = APIRouter(prefix="/api", tags=["reads"])


class LabRunOut(BaseModel):
    id: int
    lab: str
    prediction: str
    answer: str
    right: bool | None
    passed: bool | None
    finished: bool
    order_id: str
    lines: list[str]


class LabRunsOut(BaseModel):
    runs: list[LabRunOut]


class OrderSummary(BaseModel):
    order_id: str
    status: str
    age_seconds: float
    idle_seconds: float


class OrdersOut(BaseModel):
    orders: list[OrderSummary]


class OrderEvent(BaseModel):
    message_id: str
    event_type: str
    service: str
    topic: str
    published: bool


class OrderOut(BaseModel):
    order_id: str
    status: str
    events: list[OrderEvent]


class AuditOut(BaseModel):
    """The auditor's verdict, in its own dataclasses (auditor/), and the latest dead letters."""

    green: bool
    anomalies: list[Anomaly]
    parked: list[Parked]
    retrying: list[Parked]
    checks: dict[str, int]
    dead_letters: list[DeadLetter]


@router.get("/labs/runs")
def lab_runs(panel: PanelDep) -> LabRunsOut:
    """Every lab run on this system: the prediction, the auditor's answer, the lab's checks."""
    return LabRunsOut(
        runs=[
            LabRunOut(
                id=r.id,
                lab=r.lab,
                prediction=r.prediction,
                answer=r.answer,
                right=r.right,
                passed=r.passed,
                finished=r.finished is not None,
                order_id=r.order_id,
                lines=list(r.lines),
            )
            for r in panel.labs.all()
        ]
    )


@router.get("/map")
def system_map_figures(panel: PanelDep) -> dict[str, Any]:
    """The front page's map as JSON: each box with its state and figures, each arrow."""
    return system_map.to_json(system_map.build(map_readings.read(panel)))


@router.get("/slots")
def slots(panel: PanelDep) -> dict[str, Any]:
    """Under RELAY=debezium: each slot's retained log and its connector's state."""
    return panel.cdc.slots()


@router.get("/brokers")
def brokers(panel: PanelDep) -> dict[str, Any]:
    """The Kafka nodes: state, active controller, frozen, what each leads."""
    return panel.brokers.nodes()


@router.get("/databases")
def databases(panel: PanelDep) -> dict[str, Any]:
    """The PostgreSQL pair's nodes (POSTGRES=ha): each one's role and replication, the replication
    mode and every failover; {"error": …} with one server."""
    return panel.databases.nodes()


@router.get("/kafka-side")
def kafka_side_now(panel: PanelDep) -> dict[str, Any]:
    """What Kafka holds against the databases (auditor/kafka_side.py): messages a group acknowledged
    whose marker is gone (lost), events whose outbox row is gone (phantoms), each order's ghosts."""
    bootstrap = panel.settings.KAFKA_BOOTSTRAP_SERVERS
    side = kafka_side.check(panel.query, bootstrap, read_dead_letters(bootstrap))
    return {
        "clean": side.clean,
        "acknowledged": side.acknowledged,
        "published": side.published,
        "lost": [
            {
                "consumer": x.consumer,
                "order_id": x.event.order_id,
                "event_type": x.event.event_type,
                "message_id": x.event.message_id,
                "location": x.event.location,
                "at": x.event.at.isoformat(),
            }
            for x in side.lost
        ],
        "phantoms": [
            {
                "service": x.service,
                "order_id": x.event.order_id,
                "event_type": x.event.event_type,
                "message_id": x.event.message_id,
                "location": x.event.location,
                "what_to_do": x.what_to_do,
            }
            for x in side.phantoms
        ],
        "ghost_orders": side.ghost_orders,
        "report": list(kafka_side.report(side)),
    }


@router.get("/state")
def state(panel: PanelDep) -> dict[str, Any]:
    """Every process, its points, strategy and counters; restarts; the running load."""
    states = panel.control.states()
    restarts = panel.store.restarts()
    load = panel.loads.current
    return {
        "processes": [{**vars(s), "restarts": restarts.get(s.name, 0)} for s in states],
        "http_services": [
            {"name": s.name, "up": s.up, "restarts": restarts.get(s.name, 0)} for s in panel.control.http_states()
        ],
        "teaching": [s.name for s in panel.teaching(states)],
        "relay": panel.cdc.relay,
        "share_groups": {"on": panel.settings.SHARE_GROUPS == "on", "lock_seconds": panel.settings.SHARE_LOCK_SECONDS},
        "load": None
        if load is None
        else {
            "rate": load.rate,
            "count": load.count,
            "placed": load.placed,
            "failed": load.failed,
            "running": not load.done.is_set(),
            "seconds": round(time.time() - load.started, 1),
        },
    }


@router.get("/parked")
def parked(panel: PanelDep) -> dict[str, Any]:
    """Work the executors parked for an operator, with each reason; the executors that did not answer."""
    rows, silent = panel.control.parked()
    return {"parked": rows, "unreachable": silent}


@router.get("/sandbox-faults/{sandbox}")
def sandbox_faults_now(panel: PanelDep, sandbox: str) -> dict[str, Any]:
    """A sandbox's faults as they stand (a fired `timeout_after_charge` has counted down)."""
    if sandbox not in panel.control.sandboxes:
        raise HTTPException(404, f"no sandbox called {sandbox[:80]!r}; known: {', '.join(panel.control.sandboxes)}")
    try:
        return panel.control.sandbox_faults(sandbox)
    except ControlError as error:
        raise HTTPException(error.status, str(error)) from error


@router.get("/orders")
def orders(panel: PanelDep, limit: int = 100) -> OrdersOut:
    """The most recent orders with their saga status, age and time since they last moved, newest first."""
    if not 1 <= limit <= 1000:
        raise HTTPException(400, "limit must be between 1 and 1000")
    now = time.time()
    return OrdersOut(
        orders=[
            OrderSummary(
                order_id=o.order_id,
                status=o.status,
                age_seconds=round(now - o.created_at.timestamp(), 1),
                idle_seconds=round(now - o.updated_at.timestamp(), 1),
            )
            for o in records.recent_orders(panel.query, limit)
        ]
    )


@router.get("/orders/{order_id}")
def order(panel: PanelDep, order_id: str) -> OrderOut:
    """An order's saga status and the events written for it (ids and types, never payloads)."""
    try:
        row = records.order(panel.query, order_id)
        events = records.events_of_order(panel.query, order_id)
    except ValueError as error:
        raise HTTPException(400, str(error)) from error
    if row is None:
        raise HTTPException(404, f"no order {order_id}")
    return OrderOut(
        order_id=row.order_id,
        status=row.status,
        events=[
            OrderEvent(
                message_id=e.message_id,
                event_type=e.event_type,
                service=e.database,
                topic=e.topic,
                published=e.published_at is not None,
            )
            for e in events
        ],
    )


@router.get("/orders/{order_id}/proof")
def proof_of(panel: PanelDep, order_id: str) -> dict[str, Any]:
    """Each effect of the order: its event, deliveries, marker, rows, calls, and why once."""
    try:
        facts = proof_facts.read(panel.query, panel.store, order_id, panel.databases.lossy_failovers())
    except ValueError as error:
        raise HTTPException(400, str(error)) from error
    return {
        "order_id": order_id,
        "idempotency_key": facts.idempotency_key,
        "effects": [
            {
                "effect": p.spec.name,
                "consumer": p.spec.consumer,
                "event": None if p.event is None else {"type": p.event.event_type, "message_id": p.event.message_id},
                "deliveries": [vars(d) for d in p.deliveries],
                "marker": None if p.marker is None else p.marker.isoformat(),
                "rows": p.rows,
                "calls": p.calls,
                "outside": p.outside,
                "verdict": p.verdict,
                "sentence": p.sentence,
            }
            for p in proof.build(facts)
        ],
    }


@router.get("/orders/{order_id}/timeline")
def timeline(panel: PanelDep, order_id: str) -> dict[str, Any]:
    try:
        entries = timeline_of(panel, order_id)
    except ValueError as error:
        raise HTTPException(400, str(error)) from error
    return {"order_id": order_id, "entries": [vars(e) | {"clock": e.clock} for e in entries]}


@router.get("/audit")
def audit(panel: PanelDep, stuck_after: float | None = None) -> AuditOut:
    """The verdict; `stuck_after` (seconds) overrides how long a saga or an event may take."""
    if stuck_after is not None and not 1 <= stuck_after <= 86_400:
        raise HTTPException(400, "stuck_after must be between 1 and 86400 seconds")
    verdict = panel.verdict(stuck_after)
    return AuditOut(
        green=verdict.green,
        anomalies=verdict.anomalies,
        parked=verdict.parked,
        retrying=verdict.retrying,
        checks=verdict.checks,
        dead_letters=list(panel.store.dead_letters)[-200:],
    )
