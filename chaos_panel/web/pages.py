"""The panel's pages and the fragments they poll (htmx swaps them in place)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates

from chaos_panel.acting.control_endpoints import EXECUTORS
from chaos_panel.acting.injector import COPY_CHANGES, POISON_KINDS
from chaos_panel.acting.lab_runs import ANSWERS
from chaos_panel.context import Panel
from chaos_panel.domain import proof, timeline
from chaos_panel.drawing import charts, system_map
from chaos_panel.reading import map_readings, proof_facts, records
from chaos_panel.reading.health import database_checks, kafka_check
from chaos_panel.web.dependencies import PanelDep
from chaos_panel.web.security import CSRF_COOKIE, TOKEN_COOKIE, new_csrf_token, same_origin
from effectively_once.outcomes import Strategy
from effectively_once.safe_horizon import duration
from labs.catalog import BY_NAME, LABS
from services.topology import CONSUMERS, EVENT_TOPICS, TOPIC_PARTITIONS

TEMPLATES = Jinja2Templates(directory=Path(__file__).parent / "templates")


TEMPLATES.env.filters["byte_size"] = charts.byte_size

GRAFANA_DASHBOARDS = {
    "eo-overview": "Overview",
    "eo-consumers": "Consumers",
    "eo-relay": "Outbox relay",
    "eo-chaos": "Chaos",
}
"""uid -> title of the dashboards dashboards/build.py makes (a unit test keeps the two in step)."""

STRATEGY_LESSONS = {
    "correct": "claim the marker with INSERT … ON CONFLICT DO NOTHING in the business transaction",
    "check_then_act": "SELECT the marker, act, then insert it: two deliveries at once both pass the check",
    "marker_before_in_separate_txn": "commit the marker first: a crash before the effect loses the message",
    "marker_after_in_separate_txn": "commit the effect first: a crash before the marker applies it twice",
    "ack_before_commit": "acknowledge before the transaction: a crash loses the message",
    "memory_dedup_only": "remember ids in memory: a restart forgets them",
    "message_id_only_key": "one marker per message for all consumers: the second consumer skips it",
    "occurred_at_in_key": "the marker keyed by its id and occurred_at: a copy with another time is applied again",
    "no_dedup": "no marker at all: every redelivery applies again",
}


def fragment_digest(*content: object) -> str:
    """A short digest of what a fragment shows, for its next poll to send back as `seen`."""
    return hashlib.sha256(json.dumps(content, sort_keys=True, default=str).encode()).hexdigest()[:16]


def timeline_of(panel: Panel, order_id: str) -> list[timeline.Entry]:
    events = records.events_of_order(panel.query, order_id)
    return timeline.build(events, panel.store.for_key(order_id), panel.store.starts)


router = APIRouter(tags=["pages"])


def render(panel: Panel, request: Request, template: str, **context: Any) -> Response:
    csrf = request.cookies.get(CSRF_COOKIE) or new_csrf_token()
    response = TEMPLATES.TemplateResponse(
        request,
        template,
        {
            "csrf": csrf,
            "token_required": panel.guard.token_required,
            "authorised": panel.guard.token_ok(request),
            "path": request.url.path,
            **context,
        },
    )
    if request.cookies.get(CSRF_COOKIE) != csrf:
        response.set_cookie(CSRF_COOKIE, csrf, httponly=True, samesite="strict")
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["Content-Security-Policy"] = (
        "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; frame-ancestors 'none'"
    )
    return response


def _map(panel: Panel) -> dict[str, Any]:
    drawn = system_map.build(map_readings.read(panel))
    return {"map": drawn, "words": system_map.as_text(drawn)}


@router.get("/", response_class=HTMLResponse)
def front(request: Request, panel: PanelDep) -> Response:
    """The system as a live map to act on, and the auditor's verdict."""
    return render(panel, request, "map.html", **_map(panel))


@router.get("/overview", response_class=HTMLResponse)
def home(request: Request, panel: PanelDep) -> Response:
    """What runs, whether the invariants hold, and what each consumer counted."""
    return render(
        panel,
        request,
        "index.html",
        consumers=CONSUMERS,
        topics=EVENT_TOPICS,
        grafana=panel.settings.GRAFANA_URL.rstrip("/"),
        prometheus=panel.settings.PROMETHEUS_URL,
        dashboards=GRAFANA_DASHBOARDS,
    )


@router.get("/fragments/map", response_class=HTMLResponse)
def live_map(request: Request, panel: PanelDep) -> Response:
    return render(panel, request, "fragments/map.html", **_map(panel))


@router.get("/fragments/act/{name}", response_class=HTMLResponse)
def act_on(request: Request, panel: PanelDep, name: str) -> Response:
    """What can be done to one process from the map: its faults, strategy and group."""
    known = name in panel.control.control_urls
    if not known and name not in panel.control.http_services:
        raise HTTPException(404, f"no process called {name}")
    return render(
        panel,
        request,
        "fragments/act.html",
        name=name,
        state=panel.control.state(name) if known else None,
        restarts=panel.store.restarts().get(name, 0),
        lessons=STRATEGY_LESSONS,
        executors=EXECUTORS,
    )


@router.get("/labs", response_class=HTMLResponse)
def workshop_labs(request: Request, panel: PanelDep) -> Response:
    """Every lab, to run after predicting what the auditor will find."""
    return render(panel, request, "labs.html", labs=LABS, answers=ANSWERS, running=panel.labs.running())


@router.get("/labs/runs", response_class=HTMLResponse)
def instructor(request: Request, panel: PanelDep) -> Response:
    """What each lab run on this system did: the prediction beside the auditor's answer."""
    return render(panel, request, "lab_runs.html", runs=list(reversed(panel.labs.all())))


def _lab_run(panel: Panel, request: Request, run_id: int, template: str, poll: bool = False) -> Response:
    found = panel.labs.get(run_id)
    if found is None:
        raise HTTPException(404, f"no lab run {run_id}")
    response = render(panel, request, template, run=found, lab=BY_NAME[found.lab])
    if poll and found.finished is not None:
        response.status_code = 286  # htmx stops polling: the finished page stays as it is
    return response


@router.get("/labs/runs/{run_id}", response_class=HTMLResponse)
def lab_run(request: Request, panel: PanelDep, run_id: int) -> Response:
    return _lab_run(panel, request, run_id, "lab_run.html")


@router.get("/fragments/lab-run/{run_id}", response_class=HTMLResponse)
def lab_run_progress(request: Request, panel: PanelDep, run_id: int) -> Response:
    """The run's steps so far and, once it ended, the auditor's answer beside the prediction."""
    return _lab_run(panel, request, run_id, "fragments/lab_run.html", poll=True)


@router.get("/orders", response_class=HTMLResponse)
def orders(request: Request, panel: PanelDep) -> Response:
    return render(panel, request, "orders.html")


@router.get("/orders/{order_id}", response_class=HTMLResponse)
def order(request: Request, panel: PanelDep, order_id: str) -> Response:
    try:
        row = records.order(panel.query, order_id)
    except ValueError as error:
        raise HTTPException(400, str(error)) from error
    if row is None:
        raise HTTPException(404, f"no order {order_id}")
    return render(panel, request, "order.html", order=row)


@router.get("/chaos", response_class=HTMLResponse)
def chaos(request: Request, panel: PanelDep) -> Response:
    return render(
        panel,
        request,
        "chaos.html",
        states=panel.control.states(),
        http_states=panel.control.http_states(),
        restarts=panel.store.restarts(),
        strategies=list(Strategy),
        lessons=STRATEGY_LESSONS,
        poison_kinds=POISON_KINDS,
        copy_changes=COPY_CHANGES,
        topics=EVENT_TOPICS,
        sandboxes={name: _sandbox(panel, name) for name in panel.control.sandboxes},
        partitions=[f"{topic}/{n}" for topic in EVENT_TOPICS for n in range(TOPIC_PARTITIONS)],
        brokers_available=panel.brokers.available,
        databases_available=panel.databases.available,
        cdc_available=panel.cdc.available,
    )


@router.get("/parked", response_class=HTMLResponse)
def parked(request: Request, panel: PanelDep) -> Response:
    """Work the executors parked for an operator, with its reason and a re-drive button."""
    rows, unreachable = panel.control.parked()
    digest = fragment_digest(rows, unreachable)
    return render(panel, request, "parked.html", parked=rows, unreachable=unreachable, digest=digest)


@router.get("/fragments/parked", response_class=HTMLResponse)
def parked_rows(request: Request, panel: PanelDep, seen: str = "") -> Response:
    """The parked rows, or 204 (htmx leaves the page alone) when they are the ones the page
    shows: a poll that re-rendered unchanged rows would swap a Re-drive button away under the
    pointer that is about to press it."""
    rows, unreachable = panel.control.parked()
    digest = fragment_digest(rows, unreachable)
    if seen == digest:
        return Response(status_code=204)
    return render(panel, request, "fragments/parked.html", parked=rows, unreachable=unreachable, digest=digest)


@router.get("/dead-letters", response_class=HTMLResponse)
def dead_letters(request: Request, panel: PanelDep) -> Response:
    return render(panel, request, "dead_letters.html", letters=list(reversed(panel.store.dead_letters))[:500])


def _listening(panel: Panel) -> str:
    return f"{panel.settings.CHAOS_PANEL_HOST}:{panel.settings.CHAOS_PANEL_PORT}"


@router.get("/login", response_class=HTMLResponse)
def login(request: Request, panel: PanelDep) -> Response:
    """Where the panel listens, and (exposed mode) the form that takes its token."""
    return render(panel, request, "login.html", listening=_listening(panel), refused="")


@router.post("/login", response_class=HTMLResponse)
async def log_in(request: Request, panel: PanelDep) -> Response:
    """Check the form's CSRF token, then the panel's token; only the right one becomes a cookie.
    A login must come from the panel's own login page: another site cannot log a browser in."""
    if not same_origin(request):
        raise HTTPException(403, "refused: this request comes from another site")
    form = await request.form()
    offered, echoed = form.get("token"), form.get("csrf_token")
    if not panel.guard.csrf_matches(request, echoed if isinstance(echoed, str) else ""):
        raise HTTPException(403, "refused: the login form's CSRF token is missing or stale (reload /login)")
    if not panel.guard.token_required:
        return RedirectResponse("/", status_code=303)
    if not isinstance(offered, str) or not panel.guard.token_matches(offered.strip()):
        page = render(
            panel, request, "login.html", listening=_listening(panel), refused="That is not the panel's token."
        )
        page.status_code = 403
        return page
    response = RedirectResponse("/", status_code=303)
    response.set_cookie(TOKEN_COOKIE, offered.strip(), httponly=True, samesite="strict")
    return response


# Fragments, polled by the pages -------------------------------------------------------------


@router.get("/fragments/banner", response_class=HTMLResponse)
def banner(request: Request, panel: PanelDep) -> Response:
    return render(panel, request, "fragments/banner.html", teaching=panel.teaching(panel.control.states()))


@router.get("/fragments/processes", response_class=HTMLResponse)
def processes(request: Request, panel: PanelDep) -> Response:
    return render(
        panel,
        request,
        "fragments/processes.html",
        states=panel.control.states(),
        http_states=panel.control.http_states(),
        restarts=panel.store.restarts(),
    )


@router.get("/fragments/brokers", response_class=HTMLResponse)
def brokers(request: Request, panel: PanelDep) -> Response:
    return render(panel, request, "fragments/brokers.html", cluster=panel.brokers.nodes())


@router.get("/fragments/databases", response_class=HTMLResponse)
def databases(request: Request, panel: PanelDep) -> Response:
    return render(panel, request, "fragments/databases.html", pair=panel.databases.nodes())


@router.get("/fragments/slots", response_class=HTMLResponse)
def slots(request: Request, panel: PanelDep) -> Response:
    cdc = panel.cdc.slots()
    prometheus = panel.settings.PROMETHEUS_URL
    drawn = charts.charts(prometheus, charts.SLOT_CHARTS) if cdc["slots"] and prometheus else []
    return render(
        panel, request, "fragments/slots.html", cdc=cdc, charts=drawn, width=charts.WIDTH, height=charts.HEIGHT
    )


@router.get("/fragments/horizons", response_class=HTMLResponse)
def horizons(request: Request, panel: PanelDep) -> Response:
    return render(panel, request, "fragments/horizons.html", horizons=panel.horizons.current(), duration=duration)


@router.get("/fragments/verdict", response_class=HTMLResponse)
def verdict(request: Request, panel: PanelDep) -> Response:
    checks = [kafka_check(panel.settings.KAFKA_BOOTSTRAP_SERVERS), *database_checks(panel.settings.DATABASE_URL)]
    answering = all(check.ok for check in checks)
    return render(
        panel,
        request,
        "fragments/verdict.html",
        checks=checks,
        verdict=panel.verdict() if answering else None,
        dead_letters=len(panel.store.dead_letters),
    )


@router.get("/fragments/charts", response_class=HTMLResponse)
def live_charts(request: Request, panel: PanelDep) -> Response:
    drawn = charts.charts(panel.settings.PROMETHEUS_URL) if panel.settings.PROMETHEUS_URL else []
    return render(panel, request, "fragments/charts.html", charts=drawn, width=charts.WIDTH, height=charts.HEIGHT)


@router.get("/fragments/orders", response_class=HTMLResponse)
def order_list(request: Request, panel: PanelDep) -> Response:
    return render(
        panel,
        request,
        "fragments/orders.html",
        orders=records.recent_orders(panel.query),
        counts=records.status_counts(panel.query),
        load=panel.loads.current,
    )


@router.get("/fragments/proof/{order_id}", response_class=HTMLResponse)
def order_proof(request: Request, panel: PanelDep, order_id: str) -> Response:
    """Each of the order's effects with the chain that led to it, and why it happened once."""
    try:
        facts = proof_facts.read(panel.query, panel.store, order_id, panel.databases.lossy_failovers())
    except ValueError as error:
        raise HTTPException(400, str(error)) from error
    return render(panel, request, "fragments/proof.html", proofs=proof.build(facts), facts=facts)


@router.get("/fragments/timeline/{order_id}", response_class=HTMLResponse)
def order_timeline(request: Request, panel: PanelDep, order_id: str) -> Response:
    try:
        row = records.order(panel.query, order_id)
        events = records.events_of_order(panel.query, order_id)
    except ValueError as error:
        raise HTTPException(400, str(error)) from error
    entries = timeline.build(events, panel.store.for_key(order_id), panel.store.starts)
    return render(panel, request, "fragments/timeline.html", order=row, events=events, entries=entries)


def _sandbox(panel: Panel, name: str) -> dict[str, Any]:
    try:
        return panel.control.sandbox_faults(name)
    except Exception as error:  # shown on the page: the sandbox does not answer
        return {"error": str(error)}
