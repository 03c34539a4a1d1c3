"""The panel's control actions: POST /api/…, each taking JSON or a form from the panel's pages.

Every action goes through the Guard (token where needed, same origin, CSRF). Answers are JSON,
or a one-line HTML notice when htmx asks (the pages show it in place).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from html import escape
from typing import Any
from urllib.parse import quote

import psycopg
from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response

from services.chaos_panel import map_readings, proof, proof_reader, records, system_map
from services.chaos_panel.context import Panel
from services.chaos_panel.control_plane import ControlError
from services.chaos_panel.injector import COPY_CHANGES, InjectionError
from services.topology import EVENT_TOPICS, TOPIC_PARTITIONS

Action = Callable[[dict[str, Any]], Awaitable[tuple[str, dict[str, Any]]] | tuple[str, dict[str, Any]]]


class BadInput(ValueError):
    pass


def _text(body: dict[str, Any], name: str, default: str | None = None) -> str:
    value = body.get(name, default)
    if value is None or (isinstance(value, str) and not value.strip()):
        raise BadInput(f"{name} is required")
    if not isinstance(value, str):
        raise BadInput(f"{name} must be text, not {type(value).__name__}")
    text = value.strip()
    if len(text) > 255 or not text.isprintable():
        raise BadInput(f"{name} must be at most 255 printable characters")
    return text


def _number(body: dict[str, Any], name: str, default: float, low: float, high: float) -> float:
    raw = body.get(name, default)
    if isinstance(raw, bool) or not isinstance(raw, str | int | float | None):
        raise BadInput(f"{name} must be a number")
    try:
        value = float(default if raw in (None, "") else raw)
    except (TypeError, ValueError):
        raise BadInput(f"{name} must be a number") from None
    if not low <= value <= high:
        raise BadInput(f"{name} must be between {low:g} and {high:g}")
    return value


def _times(body: dict[str, Any]) -> int | None:
    raw = str(body.get("times", "1")).strip()
    if raw in ("always", "every time"):
        return None
    return int(_number(body, "times", 1, 1, 100_000))


def _numeric(name: str, value: object) -> object:
    """A form's text as the number it spells (the sandboxes take JSON numbers only); JSON as it came."""
    if not isinstance(value, str):
        return value
    try:
        return int(value)
    except ValueError:
        pass
    try:
        number = float(value)
    except ValueError:
        raise BadInput(f"{name} must be a number, not {value[:40]!r}") from None
    if number != number or number in (float("inf"), float("-inf")):
        raise BadInput(f"{name} must be a finite number")
    return number


async def _body(request: Request) -> dict[str, Any]:
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type == "application/json":
        try:
            body = await request.json()
        except ValueError:
            raise BadInput("the body is not valid JSON") from None
        if not isinstance(body, dict):
            raise BadInput("the body must be a JSON object")
        return body
    form = await request.form()
    return {name: value for name, value in form.items() if isinstance(value, str)}


def _answer(request: Request, ok: bool, message: str, data: dict[str, Any], status: int = 200) -> Response:
    if request.headers.get("hx-request"):
        css = "notice ok" if ok else "notice bad"
        order, watch = (data.get("order_id"), data.get("watch")) if ok else (None, None)
        link = f' <a href="/orders/{quote(str(order))}" id="notice-order">Open the order</a>' if order else ""
        link += f' <a href="{quote(str(watch))}" id="notice-lab-run">Watch it</a>' if watch else ""
        return HTMLResponse(f'<p class="{css}" role="status">{escape(message)}{link}</p>', status_code=200)
    return JSONResponse({"ok": ok, "message": message, **data}, status_code=status)


def router(panel: Panel) -> APIRouter:
    api = APIRouter(prefix="/api", tags=["controls"])
    control, injector = panel.control, panel.injector

    def action(path: str) -> Callable[[Action], Action]:
        def register(act: Action) -> Action:
            async def endpoint(request: Request) -> Response:
                try:
                    body = await _body(request)
                except BadInput as error:
                    panel.guard.check(request, None)
                    return _answer(request, False, str(error), {}, 400)
                panel.guard.check(request, body.pop("csrf_token", None))
                try:
                    result = act(body)
                    message, data = await result if isinstance(result, Awaitable) else result
                except (BadInput, ValueError) as error:
                    return _answer(request, False, str(error), {}, 400)
                except (ControlError, InjectionError) as error:
                    # 503 names the service that did not answer; a 4xx is the process's refusal.
                    return _answer(request, False, str(error), {}, error.status)
                except psycopg.OperationalError as error:
                    message = f"the auditor's database does not answer ({type(error).__name__}): is PostgreSQL running?"
                    return _answer(request, False, message, {}, 503)
                return _answer(request, True, message, data)

            api.add_api_route(path, endpoint, methods=["POST"], name=path.strip("/").replace("/", "_"))
            return act

        return register

    @action("/orders")
    def place_order(body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        kind = str(body.get("kind") or "ok")
        order_id = panel.loads.place_one(kind)
        return f"placed order {order_id} ({kind})", {"order_id": order_id}

    @action("/load")
    def start_load(body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        rate = _number(body, "rate", 10, 0.1, 200)
        count = int(_number(body, "count", 100, 1, 100_000))
        panel.loads.start(rate, count)
        return f"placing {count} orders at {rate:g} a second", {"rate": rate, "count": count}

    @action("/load/stop")
    def stop_load(body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        panel.loads.stop()
        return "load stopped", {}

    @action("/faults")
    def arm(body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        process, point, what = _text(body, "process"), _text(body, "point"), _text(body, "action")
        times = _times(body)
        probability = _number(body, "probability", 1, 0.001, 1)
        stall = _number(body, "stall_seconds", 5, 0, 120)
        control.arm(process, point, what, times, probability, stall)
        how_often = "every time" if times is None else f"{times} time{'s' if times != 1 else ''}"
        return f"armed {process}: {what} at {point}, {how_often}, p={probability:g}", {}

    @action("/faults/disarm")
    def disarm(body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        process = _text(body, "process")
        point = str(body.get("point") or "") or None
        control.disarm(process, point)
        return f"disarmed {point or 'every point'} on {process}", {}

    @action("/serialization-failures")
    def serialization_failures(body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        process = _text(body, "process")
        times = _times(body)
        control.arm(process, "before_commit", "serialization_failure", times, _number(body, "probability", 1, 0.001, 1))
        return (
            f"{process}: the next commits fail with SQLSTATE 40001 ({times or 'every'} time(s)); watch the retries",
            {},
        )

    @action("/strategy")
    def strategy(body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        process, chosen = _text(body, "process"), _text(body, "strategy")
        control.set_strategy(process, chosen)
        if chosen == "correct":
            return f"{process} is back on the correct strategy", {}
        return f"{process} now runs the teaching strategy {chosen}: it is deliberately unsafe", {}

    @action("/rewind")
    def rewind(body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        process, to = _text(body, "process"), _text(body, "to", "beginning")
        partitions = control.rewind(process, to)
        return f"{process} rewound {len(partitions)} partition(s) to {to}", {"partitions": partitions}

    @action("/republish")
    def republish(body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        message_id = _text(body, "message_id")
        copies = int(_number(body, "copies", 1, 1, 1000))
        spread = str(body.get("spread", "")).lower() in ("1", "true", "on", "yes")
        event = records.event(panel.query, message_id)
        if event is None:
            raise BadInput(f"no outbox row has message id {message_id}")
        sent = injector.republish(event, copies, spread)
        return (
            f"sent {copies} cop{'y' if copies == 1 else 'ies'} of {event.event_type} {message_id} to {sent.topic} "
            f"(partitions {', '.join(map(str, sent.partitions))})",
            {"order_id": event.key, "topic": sent.topic, "partitions": sent.partitions},
        )

    @action("/copy")
    def copy_with_change(body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """One copy of an event under its message id, with one field changed: a producer's bug."""
        message_id, change = _text(body, "message_id"), _text(body, "change")
        seconds = _number(body, "seconds", 86_400, -1e9, 1e9)
        event = records.event(panel.query, message_id)
        if event is None:
            raise BadInput(f"no outbox row has message id {message_id}")
        sent = injector.copy_with_change(event, change, seconds)
        return (
            f"sent a copy of {event.event_type} {message_id} with {COPY_CHANGES.get(change, change)} to {sent.topic}:"
            " every consumer that applied it should count a duplicate with different content",
            {"order_id": event.key, "topic": sent.topic, "partitions": sent.partitions},
        )

    @action("/storm")
    def storm(body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """A new order, and its OrderPlaced sent N more times at once to every partition."""
        copies = int(_number(body, "copies", 20, 1, 1000))
        order_id = panel.loads.place_one("ok")
        placed = next(
            (e for e in records.events_of_order(panel.query, order_id) if e.event_type == "OrderPlaced"), None
        )
        if placed is None:
            raise BadInput(f"order {order_id} has no OrderPlaced in the orders outbox")
        sent = injector.republish(placed, copies, spread=True)
        return (
            f"order {order_id}: its OrderPlaced sent {copies} more times across partitions "
            f"{', '.join(map(str, sent.partitions))}",
            {"order_id": order_id, "message_id": placed.message_id},
        )

    @action("/sandbox-faults")
    def sandbox_faults(body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        sandbox = _text(body, "sandbox")
        fields = {
            name: _numeric(name, value) for name, value in body.items() if name != "sandbox" and value not in (None, "")
        }
        now = control.set_sandbox_faults(sandbox, fields)
        active = ", ".join(f"{k}={v}" for k, v in now.items() if v and k != "timeout_seconds") or "none"
        return f"{sandbox} faults now: {active}", {"faults": now}

    @action("/poison")
    def poison(body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        kind = _text(body, "kind")
        topic = str(body.get("topic") or EVENT_TOPICS[0])
        if topic not in EVENT_TOPICS:
            raise BadInput(f"topic must be one of {', '.join(EVENT_TOPICS)}")
        key, sent = injector.poison(kind, topic)
        return f"sent a poison message ({kind}) to {sent.topic}; look for it among the dead letters", {"key": key}

    @action("/redrive")
    def redrive(body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        location = _text(body, "location")
        headers, sent = injector.redrive(location)
        message_id = headers.get("message-id") or "(none: it had no readable id)"
        return (
            f"re-drove {headers.get('consumer', '?')}'s dead letter {message_id} to {sent.topic} "
            "with its original bytes and id",
            {"message_id": headers.get("message-id", ""), "topic": sent.topic, "key": headers.get("key", "")},
        )

    @action("/hold")
    def hold(body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        process, topic = _text(body, "process"), _text(body, "topic")
        seconds = _number(body, "seconds", 30, 0, 600)
        partitions = control.hold(process, topic, seconds)
        if seconds == 0:
            return f"{process} released {topic}: what waited is delivered now", {"partitions": partitions}
        return (
            f"{process} holds {topic} back for {seconds:g} s ({len(partitions)} partition(s) paused now); "
            "its other topics flow",
            {"partitions": partitions},
        )

    @action("/horizon")
    def horizon(body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        process = _text(body, "process")
        raw = body.get("seconds")
        seconds = None if raw in (None, "", "configured") else _number(body, "seconds", 30, 1, 10 * 365 * 86400)
        purge = str(body.get("purge", "")).lower() in ("1", "true", "on", "yes")
        answer = control.set_horizon(process, seconds, purge)
        what = "back to its configured value" if seconds is None else f"{seconds:g} s"
        purged = f"; {answer.get('purged', 0)} marker(s) older than it purged" if purge else ""
        return f"{process}: dedup horizon {what}{purged}", answer

    @action("/parked/redrive")
    def redrive_parked(body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """Parked work back to pending, under its own idempotency key (where its service allows)."""
        process, order_id = _text(body, "process"), _text(body, "order_id")
        answer = control.redrive_parked(process, order_id)
        works = ", ".join(str(r.get("work")) for r in answer.get("redriven", [])) or "its work"
        return f"re-drove {works} of order {order_id}: pending again, same idempotency key", answer

    @action("/brokers/kill-leader")
    def kill_leader(body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """SIGKILL the node leading a partition; its supervisor starts it again."""
        topic, _, number = _text(body, "partition").rpartition("/")
        if topic not in EVENT_TOPICS or not number.isdigit() or int(number) >= TOPIC_PARTITIONS:
            raise BadInput(f"partition must be topic/n, one of {EVENT_TOPICS[0]}/0 to {EVENT_TOPICS[-1]}/2")
        done = panel.brokers.kill_leader(topic, int(number))
        return f"{done}: watch the relay and the consumers ride through it, then the auditor", {}

    @action("/brokers/freeze")
    def freeze(body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """SIGSTOP a node (it keeps its connections, answers nothing), SIGCONT it later."""
        node = int(_number(body, "node", 1, 1, 3))
        seconds = _number(body, "seconds", 15, 1, 120)
        return panel.brokers.freeze(node, seconds), {}

    @action("/brokers/restart-controller")
    def restart_controller(body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        return panel.brokers.restart_controller(), {}

    @action("/connector")
    def connector(body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """Pause or resume one outbox database's Debezium connector (RELAY=debezium)."""
        return panel.cdc.act(_text(body, "database"), _text(body, "action")), {}

    @action("/labs/run")
    def run_lab(body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """Predict, then break: run a workshop lab after the learner said what the auditor will find."""
        started = panel.labs.start(_text(body, "lab"), _text(body, "prediction"))
        return (
            f"lab {started.lab} is running; you predicted {started.prediction}",
            {"run_id": started.id, "watch": f"/labs/runs/{started.id}"},
        )

    @api.get("/labs/runs")
    def lab_runs() -> dict[str, Any]:
        """Every lab run on this system: the prediction, the auditor's answer, the lab's checks."""
        return {
            "runs": [
                {
                    "id": r.id,
                    "lab": r.lab,
                    "prediction": r.prediction,
                    "answer": r.answer,
                    "right": r.right,
                    "passed": r.passed,
                    "finished": r.finished is not None,
                    "order_id": r.order_id,
                    "lines": list(r.lines),
                }
                for r in panel.labs.runs
            ]
        }

    @api.get("/map")
    def system_map_figures() -> dict[str, Any]:
        """The front page's map as JSON: each box with its state and figures, each arrow."""
        return system_map.to_json(system_map.build(map_readings.read(panel)))

    @api.get("/slots")
    def slots() -> dict[str, Any]:
        """Under RELAY=debezium: each slot's retained log and its connector's state."""
        return panel.cdc.slots()

    @api.get("/brokers")
    def brokers() -> dict[str, Any]:
        """The Kafka nodes: state, active controller, frozen, what each leads."""
        return panel.brokers.nodes()

    @action("/reset")
    def reset(body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        panel.loads.stop()
        problems = control.reset() + panel.cdc.resume_paused()
        if problems:
            return "reset, except: " + "; ".join(problems), {"problems": problems}
        return "every fault disarmed, every consumer on the correct strategy, sandboxes clean" + (
            ", every connector running" if panel.cdc.available else ""
        ), {"problems": []}

    @api.get("/state")
    def state() -> dict[str, Any]:
        """Every process, its points, strategy and counters; restarts; the running load."""
        states = control.states()
        restarts = panel.store.restarts()
        load = panel.loads.current
        return {
            "processes": [{**vars(s), "restarts": restarts.get(s.name, 0)} for s in states],
            "http_services": [
                {"name": s.name, "up": s.up, "restarts": restarts.get(s.name, 0)} for s in control.http_states()
            ],
            "teaching": [s.name for s in panel.teaching(states)],
            "relay": panel.cdc.relay,
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

    @api.get("/parked")
    def parked() -> dict[str, Any]:
        """Work the executors parked for an operator, with each reason; the executors that did not answer."""
        rows, silent = control.parked()
        return {"parked": rows, "unreachable": silent}

    @api.get("/sandbox-faults/{sandbox}")
    def sandbox_faults_now(sandbox: str) -> dict[str, Any]:
        """A sandbox's faults as they stand (a fired `timeout_after_charge` has counted down)."""
        if sandbox not in control.sandboxes:
            raise HTTPException(404, f"no sandbox called {sandbox[:80]!r}; known: {', '.join(control.sandboxes)}")
        try:
            return control.sandbox_faults(sandbox)
        except ControlError as error:
            raise HTTPException(error.status, str(error)) from error

    @api.get("/orders")
    def orders(limit: int = 100) -> dict[str, Any]:
        """The most recent orders with their saga status, age and time since they last moved, newest first."""
        if not 1 <= limit <= 1000:
            raise HTTPException(400, "limit must be between 1 and 1000")
        now = time.time()
        return {
            "orders": [
                {
                    "order_id": o.order_id,
                    "status": o.status,
                    "age_seconds": round(now - o.created_at.timestamp(), 1),
                    "idle_seconds": round(now - o.updated_at.timestamp(), 1),
                }
                for o in records.recent_orders(panel.query, limit)
            ]
        }

    @api.get("/orders/{order_id}")
    def order(order_id: str) -> dict[str, Any]:
        """An order's saga status and the events written for it (ids and types, never payloads)."""
        try:
            row = records.order(panel.query, order_id)
            events = records.events_of_order(panel.query, order_id)
        except ValueError as error:
            raise HTTPException(400, str(error)) from error
        if row is None:
            raise HTTPException(404, f"no order {order_id}")
        return {
            "order_id": row.order_id,
            "status": row.status,
            "events": [
                {
                    "message_id": e.message_id,
                    "event_type": e.event_type,
                    "service": e.database,
                    "topic": e.topic,
                    "published": e.published_at is not None,
                }
                for e in events
            ],
        }

    @api.get("/orders/{order_id}/proof")
    def proof_of(order_id: str) -> dict[str, Any]:
        """Each effect of the order: its event, deliveries, marker, rows, calls, and why once."""
        try:
            facts = proof_reader.read(panel.query, panel.store, order_id)
        except ValueError as error:
            raise HTTPException(400, str(error)) from error
        return {
            "order_id": order_id,
            "idempotency_key": facts.idempotency_key,
            "effects": [
                {
                    "effect": p.spec.name,
                    "consumer": p.spec.consumer,
                    "event": None
                    if p.event is None
                    else {"type": p.event.event_type, "message_id": p.event.message_id},
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

    @api.get("/orders/{order_id}/timeline")
    def timeline(order_id: str) -> dict[str, Any]:
        from services.chaos_panel.pages import timeline_of

        try:
            entries = timeline_of(panel, order_id)
        except ValueError as error:
            raise HTTPException(400, str(error)) from error
        return {"order_id": order_id, "entries": [vars(e) | {"clock": e.clock} for e in entries]}

    @api.get("/audit")
    def audit(stuck_after: float | None = None) -> dict[str, Any]:
        """The verdict; `stuck_after` (seconds) overrides how long a saga or an event may take."""
        if stuck_after is not None and not 1 <= stuck_after <= 86_400:
            raise HTTPException(400, "stuck_after must be between 1 and 86400 seconds")
        verdict = panel.verdict(stuck_after)
        return {
            "green": verdict.green,
            "anomalies": [vars(a) for a in verdict.anomalies],
            "parked": [vars(p) for p in verdict.parked],
            "retrying": [vars(r) for r in verdict.retrying],
            "checks": verdict.checks,
            "dead_letters": [vars(d) for d in list(panel.store.dead_letters)[-200:]],
        }

    return api
