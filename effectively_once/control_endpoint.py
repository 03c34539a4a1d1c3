"""A process's control endpoint: Prometheus metrics, and its fault points to arm.

  GET    /metrics            Prometheus exposition
  GET    /faults             {"points": [...], "armed": {point: {...}}}
  POST   /faults             {"point": "after_claim", "action": "crash", "times": 1,
                              "probability": 1.0, "stall_seconds": 5}
  DELETE /faults[?point=x]   disarm one point, or all

A consumer process also serves (others answer 404):

  GET    /strategy           {"consumer": ..., "strategy": "correct", "strategies": [...]}
  POST   /strategy           {"strategy": "check_then_act"}   the teaching switch, stored
  POST   /rewind             {"to": "beginning"} or {"to": "2026-12-02T12:00:00Z"}
  GET    /hold               {"consumer": ..., "topics": [...], "held": {topic: seconds left}}
  POST   /hold               {"topic": "orders.events", "seconds": 30}   pause a topic (0: release)
  GET    /horizon            {"consumer": ..., "seconds": ..., "configured_seconds": ...}
  POST   /horizon            {"seconds": 10, "purge": true}   shorten it (null: the configured one)

An executor also serves:

  GET    /parked             {"service": ..., "parked": [{order_id, work, reason, ...}]}
  POST   /redrive            {"order_id": "..."}   parked work back to pending, same key (409: refused)

Who may call it: the Host must be a loopback name, an IP literal or a name in ALLOWED_HOSTS; a
browser request from another origin (Origin, Sec-Fetch-Site) is refused; a POST must be
`application/json` (a cross-site form or a `text/plain` fetch cannot send that without a CORS
preflight, which is never granted). Bodies are checked against strict models (ROUTES lists
them); every refusal is a 4xx naming the field. Requests are served on threads of their own, so
one slow client cannot block the endpoint.

Plain WSGI from the standard library, bound to loopback unless told otherwise.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from datetime import datetime
from socketserver import ThreadingMixIn
from typing import Annotated, Any, Literal, Protocol
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .faults import FAULTS_FIRED, RUNTIME_POINTS, FaultAction, FaultPoints
from .outcomes import Strategy
from .request_checks import (
    configured_hosts,
    cut,
    host_allowed,
    json_problem,
    origin_refusal,
    request_line_problem,
)

StartResponse = Callable[[str, list[tuple[str, str]]], object]
MAX_BODY = 4096
MAX_HOLD_SECONDS = 600.0
MAX_HORIZON_SECONDS = 10 * 365 * 86400.0


class RuntimeControl(Protocol):
    """What a consumer process lets the control plane change besides its fault points."""

    consumer_name: str

    def strategy(self) -> str:
        """The teaching strategy the consumer runs now."""
        ...

    def strategies(self) -> list[str]:
        """The strategies this process was given (the teaching ones only where it passed them)."""
        ...

    def set_strategy(self, strategy: str) -> None:
        """Switch to `strategy` (stored, so a restart keeps it); ValueError if it is not installed."""
        ...

    def rewind(self, to_timestamp_ms: int | None) -> list[dict[str, Any]]:
        """Move the group's offsets to a time (None: the beginning); the partitions moved."""
        ...

    def hold(self, topic: str, seconds: float) -> list[dict[str, Any]]:
        """Pause `topic`'s partitions for `seconds` (0 releases); the partitions paused."""
        ...

    def holds(self) -> dict[str, Any]:
        """The topics held back and for how long."""
        ...

    def horizon(self) -> dict[str, Any]:
        """The dedup horizon now and as configured."""
        ...

    def set_horizon(self, seconds: float | None, purge: bool) -> dict[str, Any]:
        """Shorten the horizon (None: back to the configured one), purging at once if asked."""
        ...


class ParkedControl(Protocol):
    """What an executor lets the control plane see and do about its parked work."""

    def list(self) -> dict[str, Any]:
        """{"service": ..., "parked": [...]}: the parked rows with their reasons."""
        ...

    def redrive(self, order_id: str) -> dict[str, Any]:
        """Put the order's parked work back to pending, or raise an exception saying why not."""
        ...


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")


Seconds = Annotated[float, Field(allow_inf_nan=False)]


class ArmRequest(_Strict):
    point: str = Field(max_length=100)
    action: FaultAction = Field(strict=False)
    times: Annotated[int, Field(ge=1, le=1_000_000)] | Literal["always"] | None = 1
    probability: float = Field(default=1.0, gt=0, le=1, allow_inf_nan=False)
    stall_seconds: Seconds = Field(default=5.0, ge=0, le=120)


class StrategyRequest(_Strict):
    strategy: Strategy = Field(strict=False)


class RewindRequest(_Strict):
    to: str = Field(max_length=64, description='"beginning", or an ISO 8601 time with a zone')


class HoldRequest(_Strict):
    topic: str = Field(max_length=249)
    seconds: Seconds = Field(default=30.0, ge=0, le=MAX_HOLD_SECONDS)


class HorizonRequest(_Strict):
    seconds: Seconds | None = Field(default=None, ge=1, le=MAX_HORIZON_SECONDS)
    purge: bool = False


class RedriveRequest(_Strict):
    order_id: str = Field(min_length=1, max_length=255, pattern=r"^[\x21-\x7e]+$")


ROUTES: dict[tuple[str, str], type[BaseModel] | None] = {
    ("GET", "/metrics"): None,
    ("GET", "/faults"): None,
    ("POST", "/faults"): ArmRequest,
    ("DELETE", "/faults"): None,
    ("GET", "/strategy"): None,
    ("POST", "/strategy"): StrategyRequest,
    ("POST", "/rewind"): RewindRequest,
    ("GET", "/hold"): None,
    ("POST", "/hold"): HoldRequest,
    ("GET", "/horizon"): None,
    ("POST", "/horizon"): HorizonRequest,
    ("GET", "/parked"): None,
    ("POST", "/redrive"): RedriveRequest,
}
"""Every route and the model its body must fit: the protocol, and what the property tests drive."""
RUNTIME_PATHS = ("/strategy", "/rewind", "/hold", "/horizon")
PARKED_PATHS = ("/parked", "/redrive")


class Refusal(Exception):
    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status


def parse_rewind_target(value: object) -> int | None:
    """`beginning` -> None; an ISO 8601 time with a zone -> epoch milliseconds."""
    if value == "beginning":
        return None
    if not isinstance(value, str):
        raise ValueError('"to" must be "beginning" or an ISO 8601 time')
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f'"to" must be "beginning" or an ISO 8601 time, not {cut(value)}') from None
    if moment.tzinfo is None:
        raise ValueError("the time needs a zone, e.g. 2026-12-02T12:00:00Z")
    return int(moment.timestamp() * 1000)


def _read(environ: dict[str, Any], model: type[BaseModel]) -> Any:
    """The request's JSON body as `model`, or a Refusal naming what is wrong."""
    kind = environ.get("CONTENT_TYPE", "").split(";")[0].strip().lower()
    if kind != "application/json":
        raise Refusal("415 Unsupported Media Type", "the body must be application/json")
    try:
        length = int(environ.get("CONTENT_LENGTH") or 0)
    except ValueError:
        raise Refusal("400 Bad Request", "Content-Length is not a number") from None
    if length < 0:
        raise Refusal("400 Bad Request", "Content-Length is negative")
    if length > MAX_BODY:
        raise Refusal("413 Content Too Large", f"the body must be at most {MAX_BODY} bytes")
    raw = environ["wsgi.input"].read(length) if length else b"{}"
    problem = json_problem(raw)
    if problem:
        raise Refusal("400 Bad Request", problem)
    try:
        return model.model_validate_json(raw)
    except ValidationError as error:
        first = error.errors()[0]
        field = cut(".".join(str(part) for part in first["loc"]) or "body")
        shown = f" (got {cut(first['input'])})" if first.get("input") is not None and first["loc"] else ""
        raise Refusal("400 Bad Request", f"{field}: {first['msg']}{shown}") from None


def _json(start_response: StartResponse, status: str, body: object) -> Iterable[bytes]:
    payload = json.dumps(body, default=str).encode()  # every refusal's text is cut where it is made
    start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(payload)))])
    return [payload]


def _runtime(runtime: RuntimeControl, path: str, method: str, environ: dict[str, Any]) -> tuple[str, object]:
    if path == "/strategy" and method == "GET":
        return "200 OK", {
            "consumer": runtime.consumer_name,
            "strategy": runtime.strategy(),
            "strategies": runtime.strategies(),
        }
    if path == "/strategy" and method == "POST":
        chosen = _read(environ, StrategyRequest).strategy
        try:
            runtime.set_strategy(str(chosen))
        except ValueError as error:
            raise Refusal("409 Conflict", str(error)) from None
        return "200 OK", {"consumer": runtime.consumer_name, "strategy": str(chosen)}
    if path == "/rewind" and method == "POST":
        try:
            target = parse_rewind_target(_read(environ, RewindRequest).to)
        except ValueError as error:
            raise Refusal("400 Bad Request", str(error)) from None
        try:
            partitions = runtime.rewind(target)
        except ValueError as error:
            raise Refusal("409 Conflict", str(error)) from None
        return "200 OK", {"consumer": runtime.consumer_name, "partitions": partitions}
    if path == "/hold" and method == "GET":
        return "200 OK", runtime.holds()
    if path == "/hold" and method == "POST":
        hold = _read(environ, HoldRequest)
        try:
            partitions = runtime.hold(hold.topic, hold.seconds)
        except ValueError as error:
            raise Refusal("400 Bad Request", str(error)) from None
        return "200 OK", {"consumer": runtime.consumer_name, "partitions": partitions}
    if path == "/horizon" and method == "GET":
        return "200 OK", runtime.horizon()
    if path == "/horizon" and method == "POST":
        horizon = _read(environ, HorizonRequest)
        return "200 OK", runtime.set_horizon(horizon.seconds, horizon.purge)
    raise Refusal("405 Method Not Allowed", "GET or POST")


def _parked(parked: ParkedControl, path: str, method: str, environ: dict[str, Any]) -> tuple[str, object]:
    if path == "/parked" and method == "GET":
        return "200 OK", parked.list()
    if path == "/redrive" and method == "POST":
        order_id = _read(environ, RedriveRequest).order_id
        try:
            return "200 OK", parked.redrive(order_id)
        except LookupError as error:
            raise Refusal("404 Not Found", str(error)) from None
        except ValueError as error:
            raise Refusal("409 Conflict", str(error)) from None
    raise Refusal("405 Method Not Allowed", "GET or POST")


def _faults(
    faults: FaultPoints, points: tuple[str, ...], consumer: str | None, method: str, environ: dict[str, Any]
) -> tuple[str, object]:
    if method == "GET":
        armed = {
            point: {"action": str(a.action), "remaining": a.remaining, "probability": a.probability}
            for point, a in faults.armed().items()
        }
        return "200 OK", {
            "points": list(points),
            "actions": list(FaultAction),
            "armed": armed,
            "fired": faults.fired,
            "consumer": consumer,
        }
    if method == "DELETE":
        point = parse_qs(environ.get("QUERY_STRING", "")).get("point", [None])[0]
        if point is not None and point not in points:
            raise Refusal("400 Bad Request", f"unknown fault point '{cut(point)}'; known: {', '.join(points)}")
        faults.disarm(point)
        return "200 OK", {"disarmed": point or "all"}
    if method == "POST":
        request = _read(environ, ArmRequest)
        if request.point not in points:
            raise Refusal("400 Bad Request", f"unknown fault point '{cut(request.point)}'; known: {', '.join(points)}")
        times = None if request.times in (None, "always") else int(request.times)
        faults.arm(
            request.point,
            request.action,
            times=times,
            probability=request.probability,
            stall_seconds=request.stall_seconds,
        )
        return "200 OK", {"armed": request.point}
    raise Refusal("405 Method Not Allowed", "GET, POST or DELETE")


def control_app(
    faults: FaultPoints,
    points: tuple[str, ...] = RUNTIME_POINTS,
    runtime: RuntimeControl | None = None,
    parked: ParkedControl | None = None,
    allowed_hosts: frozenset[str] | None = None,
) -> Callable[..., Iterable[bytes]]:
    """The WSGI application serving metrics and fault control for `faults`."""
    metrics = make_wsgi_app()
    allowed = configured_hosts() if allowed_hosts is None else allowed_hosts

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path, method = environ.get("PATH_INFO", ""), environ.get("REQUEST_METHOD", "GET")
        try:
            _door(environ, method, allowed)
            if path == "/metrics" and method == "GET":
                return metrics(environ, start_response)  # type: ignore[no-any-return]
            if path in RUNTIME_PATHS and runtime is not None:
                status, body = _runtime(runtime, path, method, environ)
            elif path in PARKED_PATHS and parked is not None:
                status, body = _parked(parked, path, method, environ)
            elif path == "/faults":
                status, body = _faults(faults, points, runtime.consumer_name if runtime else None, method, environ)
            else:
                raise Refusal("404 Not Found", "unknown path")
        except Refusal as refusal:
            status, body = refusal.status, {"error": str(refusal)}
        except Exception as error:  # the process could not do it (the broker or the database is away)
            status, body = "503 Service Unavailable", {"error": f"{type(error).__name__}: {cut(str(error))}"}
        return _json(start_response, status, body)

    return app


def _door(environ: dict[str, Any], method: str, allowed: frozenset[str]) -> None:
    host = environ.get("HTTP_HOST")
    if not host_allowed(host, allowed):
        raise Refusal("400 Bad Request", f"the Host {cut(host or '')} is not one this endpoint answers to")
    refusal = origin_refusal(
        environ.get("HTTP_ORIGIN"), host, environ.get("HTTP_SEC_FETCH_SITE"), environ.get("wsgi.url_scheme", "http")
    )
    if refusal:
        raise Refusal("403 Forbidden", refusal)
    # PATH_INFO is decoded by wsgiref as latin-1: its bytes are the request's own.
    path = environ.get("PATH_INFO", "").encode("latin-1", "replace")
    problem = request_line_problem(path, environ.get("QUERY_STRING", "").encode("latin-1", "replace"))
    if problem:
        raise Refusal("400 Bad Request", problem)
    if method not in ("GET", "POST", "DELETE", "HEAD"):
        raise Refusal("405 Method Not Allowed", "GET, POST or DELETE")


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


def serve_control(
    faults: FaultPoints,
    host: str,
    port: int,
    points: tuple[str, ...] = RUNTIME_POINTS,
    runtime: RuntimeControl | None = None,
    parked: ParkedControl | None = None,
    allowed_hosts: frozenset[str] | None = None,
) -> WSGIServer:
    """Serve the control endpoint in a daemon thread, a thread per request; return the server
    (shutdown() stops it). `allowed_hosts`: the Host names it answers besides loopback names and
    IP literals (by default, the process's ALLOWED_HOSTS)."""
    for point in points:  # every point's counter exists from the start, at zero
        FAULTS_FIRED.labels(point)
    server = make_server(
        host,
        port,
        control_app(faults, points, runtime, parked, allowed_hosts),
        server_class=_ThreadingServer,
        handler_class=_QuietHandler,
    )
    threading.Thread(target=server.serve_forever, name="control", daemon=True).start()
    return server
