"""A consumer process's control endpoint: Prometheus metrics, and its fault points to arm.

  GET    /metrics            Prometheus exposition
  GET    /faults             {"points": [...], "armed": {point: {...}}}
  POST   /faults             {"point": "after_claim", "action": "crash", "times": 1,
                              "probability": 1.0, "stall_seconds": 5}
  DELETE /faults[?point=x]   disarm one point, or all

Plain WSGI from the standard library, bound to loopback unless told otherwise.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app

from services.idempotent_consumer.faults import RUNTIME_POINTS, FaultAction, FaultPoints

StartResponse = Callable[[str, list[tuple[str, str]]], object]
MAX_BODY = 4096


def _json(start_response: StartResponse, status: str, body: object) -> Iterable[bytes]:
    payload = json.dumps(body).encode()
    start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(payload)))])
    return [payload]


def control_app(faults: FaultPoints, points: tuple[str, ...] = RUNTIME_POINTS) -> Callable[..., Iterable[bytes]]:
    """The WSGI application serving metrics and fault control for `faults`."""
    metrics = make_wsgi_app()

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path, method = environ.get("PATH_INFO", ""), environ.get("REQUEST_METHOD", "GET")
        if path == "/metrics":
            return metrics(environ, start_response)  # type: ignore[no-any-return]
        if path != "/faults":
            return _json(start_response, "404 Not Found", {"error": "unknown path"})
        if method == "GET":
            armed = {
                point: {"action": str(a.action), "remaining": a.remaining, "probability": a.probability}
                for point, a in faults.armed().items()
            }
            return _json(start_response, "200 OK", {"points": list(points), "armed": armed, "fired": faults.fired})
        if method == "DELETE":
            point = parse_qs(environ.get("QUERY_STRING", "")).get("point", [None])[0]
            faults.disarm(point)
            return _json(start_response, "200 OK", {"disarmed": point or "all"})
        if method == "POST":
            try:
                length = int(environ.get("CONTENT_LENGTH") or 0)
                if length > MAX_BODY:
                    raise ValueError(f"body larger than {MAX_BODY} bytes")
                request = json.loads(environ["wsgi.input"].read(length) or b"{}")
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


def serve_control(faults: FaultPoints, host: str, port: int, points: tuple[str, ...] = RUNTIME_POINTS) -> WSGIServer:
    """Serve the control endpoint in a daemon thread; return the server (shutdown() stops it)."""
    server = make_server(host, port, control_app(faults, points), handler_class=_QuietHandler)
    threading.Thread(target=server.serve_forever, name="control", daemon=True).start()
    return server
