"""The control endpoint from outside: no input answers 5xx, a refused request changes nothing, and
a web page can neither arm a fault (no `text/plain` POST, no foreign Origin) nor reach it under a
foreign Host. Requests are drawn from each route's own request model, hostile values mixed in."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from effectively_once.control_endpoint import ROUTES, control_app
from effectively_once.faults import FaultPoints
from tests.support.hostile_requests import Drawn, Operation, examples, requests_for
from tests.unit.test_control_endpoint import _FakeConsumerProcess, environ_of


class _FakeParked:
    def __init__(self) -> None:
        self.redriven: list[str] = []

    def list(self) -> dict[str, Any]:
        return {"service": "notification", "parked": []}

    def redrive(self, order_id: str) -> dict[str, Any]:
        if order_id != "order-1":
            raise ValueError(f"order {order_id} has no parked notification")
        self.redriven.append(order_id)
        return {"order_id": order_id, "redriven": []}


def _call(app: Any, drawn: Drawn) -> tuple[str, bytes]:
    path, _, query = drawn.url.partition("?")
    from urllib.parse import unquote_to_bytes

    environ = environ_of(
        drawn.method,
        unquote_to_bytes(path).decode("latin-1"),
        drawn.content or b"",
        query,
        CONTENT_TYPE=drawn.headers.get("content-type", b"").decode("latin-1"),
    )
    status: list[str] = []
    body = b"".join(app(environ, lambda s, _h: status.append(s)))
    return status[0], body


def _state(faults: FaultPoints, runtime: _FakeConsumerProcess, parked: _FakeParked) -> object:
    return (
        dict(faults.armed()),
        runtime.current,
        runtime.rewound[:],
        runtime.held,
        runtime.seconds,
        parked.redriven[:],
    )


@pytest.mark.parametrize(("method", "path"), sorted(ROUTES), ids=[f"{m} {p}" for m, p in sorted(ROUTES)])
def test_no_input_answers_5xx_and_a_refusal_changes_nothing(method: str, path: str) -> None:
    model = ROUTES[(method, path)]
    schema = model.model_json_schema() if model else None
    components = (schema or {}).get("$defs", {})
    operation = Operation(method, path, [{"in": "query", "name": "point", "schema": {"type": "string"}}], schema)

    @settings(max_examples=examples(80), deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(drawn=requests_for(operation, components))
    def check(drawn: Drawn) -> None:
        faults, runtime, parked = FaultPoints(), _FakeConsumerProcess(), _FakeParked()
        app = control_app(faults, runtime=runtime, parked=parked, allowed_hosts=frozenset())
        before = _state(faults, runtime, parked)
        status, body = _call(app, drawn)
        assert not status.startswith("5"), (
            f"{drawn.method} {drawn.url[:100]} {drawn.content!r:.200}: {status} {body[:200]!r}"
        )
        if not status.startswith("2"):
            assert _state(faults, runtime, parked) == before, f"refused with {status}, yet it changed something"
            assert len(body) < 2_000 and "error" in json.loads(body)

    check()


def _post(app: Any, path: str, body: bytes, **headers: str) -> str:
    status: list[str] = []
    app(environ_of("POST", path, body, **headers), lambda s, _h: status.append(s))
    return status[0]


ARM = json.dumps({"point": "after_claim", "action": "crash"}).encode()


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data", ""])
def test_a_post_that_is_not_json_arms_nothing(content_type: str) -> None:
    faults = FaultPoints()
    status = _post(control_app(faults), "/faults", ARM, CONTENT_TYPE=content_type)
    assert status.startswith("415") and faults.armed() == {}


@pytest.mark.parametrize(
    "headers",
    [
        {"HTTP_ORIGIN": "http://evil.example"},
        {"HTTP_ORIGIN": "null"},
        {"HTTP_ORIGIN": "http://127.0.0.1:8080"},  # another port is another origin
        {"HTTP_SEC_FETCH_SITE": "cross-site"},
    ],
)
def test_a_foreign_origin_arms_nothing(headers: dict[str, str]) -> None:
    faults = FaultPoints()
    assert _post(control_app(faults), "/faults", ARM, **headers).startswith("403") and faults.armed() == {}


@pytest.mark.parametrize(
    "host", ["rebind.attacker.example", "rebind.attacker.example:9103", "", "localhost.evil.example"]
)
def test_a_foreign_host_reads_nothing_and_arms_nothing(host: str) -> None:
    faults = FaultPoints()
    app = control_app(faults, allowed_hosts=frozenset())
    assert _post(app, "/faults", ARM, HTTP_HOST=host).startswith("400") and faults.armed() == {}
    status: list[str] = []
    app(environ_of("GET", "/faults", HTTP_HOST=host), lambda s, _h: status.append(s))
    assert status[0].startswith("400")


def test_the_same_origin_and_the_configured_names_are_served() -> None:
    faults = FaultPoints()
    assert _post(control_app(faults), "/faults", ARM, HTTP_ORIGIN="http://127.0.0.1:9103") == "200 OK"
    other_scheme = _post(control_app(FaultPoints()), "/faults", ARM, HTTP_ORIGIN="https://127.0.0.1:9103")
    assert other_scheme.startswith("403"), "an https page is another origin than this http endpoint"
    named = control_app(FaultPoints(), allowed_hosts=frozenset({"inventory"}))
    assert _post(named, "/faults", ARM, HTTP_HOST="inventory:9103") == "200 OK"
    assert _post(named, "/faults", ARM, HTTP_HOST="[::1]:9103") == "200 OK"
