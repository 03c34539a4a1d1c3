"""A consumer process's control endpoint: Prometheus metrics, and its fault points to arm.

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

Plain WSGI from the standard library, bound to loopback unless told otherwise.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any, Protocol
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app

from services.idempotent_consumer.faults import FAULTS_FIRED, RUNTIME_POINTS, FaultAction, FaultPoints
from services.idempotent_consumer.outcomes import Strategy

StartResponse = Callable[[str, list[tuple[str, str]]], object]
MAX_BODY = 4096
MAX_HOLD_SECONDS = 600.0


class RuntimeControl(Protocol):
    """What a consumer process lets the control plane change besides its fault points."""

    consumer_name: str

    def strategy(self) -> str: ...

    def set_strategy(self, strategy: str) -> None: ...

    def rewind(self, to_timestamp_ms: int | None) -> list[dict[str, Any]]: ...

    def hold(self, topic: str, seconds: float) -> list[dict[str, Any]]: ...

    def holds(self) -> dict[str, Any]: ...

    def horizon(self) -> dict[str, Any]: ...

    def set_horizon(self, seconds: float | None, purge: bool) -> dict[str, Any]: ...


def _read_json(environ: dict[str, Any]) -> dict[str, Any]:
    length = int(environ.get("CONTENT_LENGTH") or 0)
    if length > MAX_BODY:
        raise ValueError(f"body larger than {MAX_BODY} bytes")
    body = json.loads(environ["wsgi.input"].read(length) or b"{}")
    if not isinstance(body, dict):
        raise ValueError("the body must be a JSON object")
    return body


def parse_rewind_target(value: object) -> int | None:
    """`beginning` -> None; an ISO 8601 time with a zone -> epoch milliseconds."""
    if value == "beginning":
        return None
    if not isinstance(value, str):
        raise ValueError('"to" must be "beginning" or an ISO 8601 time')
    moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        raise ValueError("the time needs a zone, e.g. 2026-12-02T12:00:00Z")
    return int(moment.timestamp() * 1000)


def _json(start_response: StartResponse, status: str, body: object) -> Iterable[bytes]:
    payload = json.dumps(body).encode()
    start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(payload)))])
    return [payload]


def _runtime(runtime: RuntimeControl, path: str, method: str, environ: dict[str, Any]) -> tuple[str, object]:
    try:
        if path == "/strategy" and method == "GET":
            return "200 OK", {
                "consumer": runtime.consumer_name,
                "strategy": runtime.strategy(),
                "strategies": list(Strategy),
            }
        if path == "/strategy" and method == "POST":
            strategy = _read_json(environ).get("strategy")
            if strategy not in Strategy.__members__.values():
                raise ValueError(f"unknown strategy {strategy!r}; known: {', '.join(Strategy)}")
            runtime.set_strategy(str(strategy))
            return "200 OK", {"consumer": runtime.consumer_name, "strategy": strategy}
        if path == "/rewind" and method == "POST":
            target = parse_rewind_target(_read_json(environ).get("to"))
            return "200 OK", {"consumer": runtime.consumer_name, "partitions": runtime.rewind(target)}
        if path == "/hold" and method == "GET":
            return "200 OK", runtime.holds()
        if path == "/hold" and method == "POST":
            request = _read_json(environ)
            seconds = float(request.get("seconds", 30))
            if not 0 <= seconds <= MAX_HOLD_SECONDS:
                raise ValueError(f"seconds must be between 0 (release) and {MAX_HOLD_SECONDS:.0f}")
            topic = request.get("topic")
            if not isinstance(topic, str):
                raise ValueError('"topic" must name a topic this consumer reads')
            return "200 OK", {"consumer": runtime.consumer_name, "partitions": runtime.hold(topic, seconds)}
        if path == "/horizon" and method == "GET":
            return "200 OK", runtime.horizon()
        if path == "/horizon" and method == "POST":
            request = _read_json(environ)
            raw = request.get("seconds")
            horizon = None if raw is None else float(raw)
            if horizon is not None and horizon < 1:
                raise ValueError("seconds must be at least 1, or null for the configured horizon")
            return "200 OK", runtime.set_horizon(horizon, bool(request.get("purge", False)))
    except (KeyError, ValueError, TypeError) as error:
        return "400 Bad Request", {"error": str(error)}
    except Exception as error:  # the process could not do it (the broker or the database is away)
        return "503 Service Unavailable", {"error": f"{type(error).__name__}: {error}"}
    return "405 Method Not Allowed", {"error": "GET or POST"}


def control_app(
    faults: FaultPoints, points: tuple[str, ...] = RUNTIME_POINTS, runtime: RuntimeControl | None = None
) -> Callable[..., Iterable[bytes]]:
    """The WSGI application serving metrics and fault control for `faults`."""
    metrics = make_wsgi_app()

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path, method = environ.get("PATH_INFO", ""), environ.get("REQUEST_METHOD", "GET")
        if path == "/metrics":
            return metrics(environ, start_response)  # type: ignore[no-any-return]
        if path in ("/strategy", "/rewind", "/hold", "/horizon") and runtime is not None:
            status, body = _runtime(runtime, path, method, environ)
            return _json(start_response, status, body)
        if path != "/faults":
            return _json(start_response, "404 Not Found", {"error": "unknown path"})
        if method == "GET":
            armed = {
                point: {"action": str(a.action), "remaining": a.remaining, "probability": a.probability}
                for point, a in faults.armed().items()
            }
            return _json(
                start_response,
                "200 OK",
                {
                    "points": list(points),
                    "actions": list(FaultAction),
                    "armed": armed,
                    "fired": faults.fired,
                    "consumer": runtime.consumer_name if runtime else None,
                },
            )
        if method == "DELETE":
            point = parse_qs(environ.get("QUERY_STRING", "")).get("point", [None])[0]
            faults.disarm(point)
            return _json(start_response, "200 OK", {"disarmed": point or "all"})
        if method == "POST":
            try:
                request = _read_json(environ)
                point = request["point"]
                if point not in points:
                    raise ValueError(f"unknown fault point {point!r}; known: {', '.join(points)}")
                times = request.get("times", 1)
                faults.arm(
                    point,
                    FaultAction(request["action"]),
                    times=None if times in (None, "always") else int(times),
                    probability=float(request.get("probability", 1.0)),
                    stall_seconds=float(request.get("stall_seconds", 5.0)),
                )
            except (KeyError, ValueError, TypeError) as error:
                return _json(start_response, "400 Bad Request", {"error": str(error)})
            return _json(start_response, "200 OK", {"armed": point})
        return _json(start_response, "405 Method Not Allowed", {"error": "GET, POST or DELETE"})

    return app


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def serve_control(
    faults: FaultPoints,
    host: str,
    port: int,
    points: tuple[str, ...] = RUNTIME_POINTS,
    runtime: RuntimeControl | None = None,
) -> WSGIServer:
    """Serve the control endpoint in a daemon thread; return the server (shutdown() stops it)."""
    for point in points:  # every point's counter exists from the start, at zero
        FAULTS_FIRED.labels(point)
    server = make_server(host, port, control_app(faults, points, runtime), handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="control", daemon=True).start()
    return server
