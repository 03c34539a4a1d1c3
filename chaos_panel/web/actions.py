"""The panel's actions: POST /api/…, each taking JSON or a form from the panel's pages (the reads,
GET /api/…, are reads.py's).

Every action goes through the Guard (token where needed, same origin, CSRF). Answers are JSON,
or a one-line HTML notice when htmx asks (the pages show it in place).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from html import escape
from typing import Any
from urllib.parse import quote

import psycopg
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, JSONResponse, Response

from chaos_panel.acting.control_endpoints import ControlError
from chaos_panel.acting.injector import COPY_CHANGES, InjectionError
from chaos_panel.context import Panel
from chaos_panel.reading import records
from chaos_panel.web.dependencies import PanelDep
from services.topology import EVENT_TOPICS, TOPIC_PARTITIONS

Action = Callable[[Panel, dict[str, Any]], Awaitable[tuple[str, dict[str, Any]]] | tuple[str, dict[str, Any]]]
"""An action: the panel and the request's body in; the message and the data to answer with out."""


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


router = APIRouter(prefix="/api", tags=["actions"])


def action(path: str) -> Callable[[Action], Action]:
    def register(act: Action) -> Action:
        async def endpoint(request: Request, panel: PanelDep) -> Response:
            try:
                body = await _body(request)
            except BadInput as error:
                panel.guard.check(request, None)
                return _answer(request, False, str(error), {}, 400)
            panel.guard.check(request, body.pop("csrf_token", None))
            try:
                result = act(panel, body)
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

        router.add_api_route(path, endpoint, methods=["POST"], name=path.strip("/").replace("/", "_"))
        return act

    return register


@action("/orders")
def place_order(panel: Panel, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    kind = str(body.get("kind") or "ok")
    order_id = panel.loads.place_one(kind)
    return f"placed order {order_id} ({kind})", {"order_id": order_id}


@action("/load")
def start_load(panel: Panel, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    rate = _number(body, "rate", 10, 0.1, 200)
    count = int(_number(body, "count", 100, 1, 100_000))
    panel.loads.start(rate, count)
    return f"placing {count} orders at {rate:g} a second", {"rate": rate, "count": count}


@action("/load/stop")
def stop_load(panel: Panel, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    panel.loads.stop()
    return "load stopped", {}


@action("/faults")
def arm(panel: Panel, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    process, point, what = _text(body, "process"), _text(body, "point"), _text(body, "action")
    times = _times(body)
    probability = _number(body, "probability", 1, 0.001, 1)
    stall = _number(body, "stall_seconds", 5, 0, 120)
    panel.control.arm(process, point, what, times, probability, stall)
    how_often = "every time" if times is None else f"{times} time{'s' if times != 1 else ''}"
    return f"armed {process}: {what} at {point}, {how_often}, p={probability:g}", {}


@action("/faults/disarm")
def disarm(panel: Panel, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    process = _text(body, "process")
    point = str(body.get("point") or "") or None
    panel.control.disarm(process, point)
    return f"disarmed {point or 'every point'} on {process}", {}


@action("/serialization-failures")
def serialization_failures(panel: Panel, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    process = _text(body, "process")
    times = _times(body)
    panel.control.arm(
        process, "before_commit", "serialization_failure", times, _number(body, "probability", 1, 0.001, 1)
    )
    return (
        f"{process}: the next commits fail with SQLSTATE 40001 ({times or 'every'} time(s)); watch the retries",
        {},
    )


@action("/strategy")
def strategy(panel: Panel, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    process, chosen = _text(body, "process"), _text(body, "strategy")
    panel.control.set_strategy(process, chosen)
    if chosen == "correct":
        return f"{process} is back on the correct strategy", {}
    return f"{process} now runs the teaching strategy {chosen}: it is deliberately unsafe", {}


@action("/rewind")
def rewind(panel: Panel, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    process, to = _text(body, "process"), _text(body, "to", "beginning")
    partitions = panel.control.rewind(process, to)
    return f"{process} rewound {len(partitions)} partition(s) to {to}", {"partitions": partitions}


@action("/republish")
def republish(panel: Panel, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    message_id = _text(body, "message_id")
    copies = int(_number(body, "copies", 1, 1, 1000))
    spread = str(body.get("spread", "")).lower() in ("1", "true", "on", "yes")
    event = records.event(panel.query, message_id)
    if event is None:
        raise BadInput(f"no outbox row has message id {message_id}")
    sent = panel.injector.republish(event, copies, spread)
    return (
        f"sent {copies} cop{'y' if copies == 1 else 'ies'} of {event.event_type} {message_id} to {sent.topic} "
        f"(partitions {', '.join(map(str, sent.partitions))})",
        {"order_id": event.key, "topic": sent.topic, "partitions": sent.partitions},
    )


@action("/copy")
def copy_with_change(panel: Panel, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """One copy of an event under its message id, with one field changed: a producer's bug."""
    message_id, change = _text(body, "message_id"), _text(body, "change")
    seconds = _number(body, "seconds", 86_400, -1e9, 1e9)
    event = records.event(panel.query, message_id)
    if event is None:
        raise BadInput(f"no outbox row has message id {message_id}")
    sent = panel.injector.copy_with_change(event, change, seconds)
    return (
        f"sent a copy of {event.event_type} {message_id} with {COPY_CHANGES.get(change, change)} to {sent.topic}:"
        " every consumer that applied it should count a duplicate with different content",
        {"order_id": event.key, "topic": sent.topic, "partitions": sent.partitions},
    )


@action("/storm")
def storm(panel: Panel, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """A new order, and its OrderPlaced sent N more times at once to every partition."""
    copies = int(_number(body, "copies", 20, 1, 1000))
    order_id = panel.loads.place_one("ok")
    placed = next((e for e in records.events_of_order(panel.query, order_id) if e.event_type == "OrderPlaced"), None)
    if placed is None:
        raise BadInput(f"order {order_id} has no OrderPlaced in the orders outbox")
    sent = panel.injector.republish(placed, copies, spread=True)
    return (
        f"order {order_id}: its OrderPlaced sent {copies} more times across partitions "
        f"{', '.join(map(str, sent.partitions))}",
        {"order_id": order_id, "message_id": placed.message_id},
    )


@action("/sandbox-faults")
def sandbox_faults(panel: Panel, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    sandbox = _text(body, "sandbox")
    fields = {
        name: _numeric(name, value) for name, value in body.items() if name != "sandbox" and value not in (None, "")
    }
    now = panel.control.set_sandbox_faults(sandbox, fields)
    active = ", ".join(f"{k}={v}" for k, v in now.items() if v and k != "timeout_seconds") or "none"
    return f"{sandbox} faults now: {active}", {"faults": now}


@action("/poison")
def poison(panel: Panel, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    kind = _text(body, "kind")
    topic = str(body.get("topic") or EVENT_TOPICS[0])
    if topic not in EVENT_TOPICS:
        raise BadInput(f"topic must be one of {', '.join(EVENT_TOPICS)}")
    key, sent = panel.injector.poison(kind, topic)
    return f"sent a poison message ({kind}) to {sent.topic}; look for it among the dead letters", {"key": key}


@action("/redrive")
def redrive(panel: Panel, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    location = _text(body, "location")
    headers, sent = panel.injector.redrive(location)
    message_id = headers.get("message-id") or "(none: it had no readable id)"
    return (
        f"re-drove {headers.get('consumer', '?')}'s dead letter {message_id} to {sent.topic} "
        "with its original bytes and id",
        {"message_id": headers.get("message-id", ""), "topic": sent.topic, "key": headers.get("key", "")},
    )


@action("/hold")
def hold(panel: Panel, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    process, topic = _text(body, "process"), _text(body, "topic")
    seconds = _number(body, "seconds", 30, 0, 600)
    partitions = panel.control.hold(process, topic, seconds)
    if seconds == 0:
        return f"{process} released {topic}: what waited is delivered now", {"partitions": partitions}
    return (
        f"{process} holds {topic} back for {seconds:g} s ({len(partitions)} partition(s) paused now); "
        "its other topics flow",
        {"partitions": partitions},
    )


@action("/horizon")
def horizon(panel: Panel, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    process = _text(body, "process")
    raw = body.get("seconds")
    seconds = None if raw in (None, "", "configured") else _number(body, "seconds", 30, 1, 10 * 365 * 86400)
    purge = str(body.get("purge", "")).lower() in ("1", "true", "on", "yes")
    answer = panel.control.set_horizon(process, seconds, purge)
    what = "back to its configured value" if seconds is None else f"{seconds:g} s"
    purged = f"; {answer.get('purged', 0)} marker(s) older than it purged" if purge else ""
    return f"{process}: dedup horizon {what}{purged}", answer


@action("/parked/redrive")
def redrive_parked(panel: Panel, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Parked work back to pending, under its own idempotency key (where its service allows)."""
    process, order_id = _text(body, "process"), _text(body, "order_id")
    answer = panel.control.redrive_parked(process, order_id)
    works = ", ".join(str(r.get("work")) for r in answer.get("redriven", [])) or "its work"
    return f"re-drove {works} of order {order_id}: pending again, same idempotency key", answer


@action("/brokers/kill-leader")
def kill_leader(panel: Panel, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """SIGKILL the node leading a partition; its supervisor starts it again."""
    topic, _, number = _text(body, "partition").rpartition("/")
    if topic not in EVENT_TOPICS or not number.isdigit() or int(number) >= TOPIC_PARTITIONS:
        raise BadInput(f"partition must be topic/n, one of {EVENT_TOPICS[0]}/0 to {EVENT_TOPICS[-1]}/2")
    done = panel.brokers.kill_leader(topic, int(number))
    return f"{done}: watch the relay and the consumers ride through it, then the auditor", {}


@action("/brokers/freeze")
def freeze(panel: Panel, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """SIGSTOP a node (it keeps its connections, answers nothing), SIGCONT it later."""
    node = int(_number(body, "node", 1, 1, 3))
    seconds = _number(body, "seconds", 15, 1, 120)
    return panel.brokers.freeze(node, seconds), {}


@action("/brokers/restart-controller")
def restart_controller(panel: Panel, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return panel.brokers.restart_controller(), {}


@action("/databases/failover")
def failover(panel: Panel, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """SIGKILL the primary, promote the standby, rebuild the old primary as its standby."""
    return f"{panel.databases.failover()}: watch every process find the new primary, then the auditor", {}


@action("/databases/detach-standby")
def detach_standby(panel: Panel, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Stop the standby's WAL receiver: with an asynchronous standby, commits go on without it."""
    return panel.databases.detach_standby(), {}


@action("/databases/attach-standby")
def attach_standby(panel: Panel, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return panel.databases.attach_standby(), {}


@action("/databases/sync")
def synchronous(panel: Panel, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Commits wait for the standby (`on`), or not (`off`)."""
    on = _text(body, "mode")
    if on not in ("on", "off"):
        raise BadInput("mode must be on or off")
    return panel.databases.set_synchronous(on == "on"), {}


@action("/rewind-all")
def rewind_all(panel: Panel, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Rewind every consumer process to one time (ISO 8601, with its zone): the recovery after a
    failover lost acknowledged work. The markers make what survived a duplicate."""
    to = _text(body, "to")
    try:
        when = datetime.fromisoformat(to.replace("Z", "+00:00"))
    except ValueError as error:
        raise BadInput("to must be an ISO 8601 time, such as 2026-12-06T10:00:00Z") from error
    if when.tzinfo is None:
        raise BadInput("to must carry its time zone (Z or an offset)")
    rewound = panel.control.rewind_every_consumer(when.isoformat())
    partitions = sum(len(each) for each in rewound.values())
    return f"{len(rewound)} consumer process(es) rewound, {partitions} partition(s), to {to}", {"rewound": rewound}


@action("/connector")
def connector(panel: Panel, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Pause or resume one outbox database's Debezium connector (RELAY=debezium)."""
    return panel.cdc.act(_text(body, "database"), _text(body, "action")), {}


@action("/labs/run")
def run_lab(panel: Panel, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Predict, then break: run a workshop lab after the learner said what the auditor will find."""
    started = panel.labs.start(_text(body, "lab"), _text(body, "prediction"))
    return (
        f"lab {started.lab} is running; you predicted {started.prediction}",
        {"run_id": started.id, "watch": f"/labs/runs/{started.id}"},
    )


@action("/reset")
def reset(panel: Panel, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    panel.loads.stop()
    problems = panel.control.reset() + panel.cdc.resume_paused()
    if problems:
        return "reset, except: " + "; ".join(problems), {"problems": problems}
    return "every fault disarmed, every consumer on the correct strategy, sandboxes clean" + (
        ", every connector running" if panel.cdc.available else ""
    ), {"problems": []}
