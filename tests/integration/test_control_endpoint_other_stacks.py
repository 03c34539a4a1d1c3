"""The Java and TypeScript consumers' control endpoints from outside, held to the same rules as the
Python runtime's (tests/unit/test_control_endpoint_hostile.py): no input answers 5xx, a refused
request arms nothing, and a web page can neither arm a fault (a `text/plain` POST, a foreign
Origin) nor reach one under a foreign Host. Requests are drawn from the protocol's own request
model (effectively_once.control_endpoint.ROUTES), hostile values mixed in, and sent over a real socket to
the real processes."""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings

from effectively_once import contract
from effectively_once.contract import kafka
from effectively_once.contract.running import RunningConsumer
from effectively_once.control_endpoint import ROUTES
from services.settings import PROJECT_ROOT, Settings
from tests.integration.conftest import service_schema
from tests.integration.test_contract_suite import _placed, _units_reserved
from tests.support.hostile_requests import Drawn, Operation, examples, requests_for
from tests.support.stacks import JAVA_QUICK_START, java_inventory_command, node_inventory_command

COMMANDS = {"java": java_inventory_command, "node": node_inventory_command}
PROTOCOL = {
    route: model
    for route, model in ROUTES.items()
    if route[1] in ("/metrics", "/faults", "/strategy", "/rewind", "/hold", "/horizon")
}
ARM = json.dumps({"point": "after_claim", "action": "crash"}).encode()


@pytest.fixture(scope="module", params=sorted(COMMANDS))
def endpoint(request: pytest.FixtureRequest, runtime_db: str, settings: Settings) -> Iterator[RunningConsumer]:
    subject = contract.ProcessSubject(
        database_url=service_schema(runtime_db, "inventory", as_url=True),
        bootstrap_servers=settings.kafka_bootstrap_servers,
        command=COMMANDS[request.param](),
        cwd=PROJECT_ROOT,
        environment={"JAVA_TOOL_OPTIONS": JAVA_QUICK_START, "LOG_LEVEL": "WARNING"},
        make_event=_placed,
        effects=_units_reserved,
    )
    name = subject.consumer_name(f"control-{request.param}")
    topics = kafka.new_topics(settings.kafka_bootstrap_servers, name)
    with RunningConsumer(subject, name, [topics.events], topics.dead_letters) as running:
        yield running


def _send(port: int, drawn: Drawn, host: str | None = None) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
    try:
        connection.putrequest(drawn.method, drawn.url, skip_host=True, skip_accept_encoding=True)
        connection.putheader("Host", host if host is not None else f"127.0.0.1:{port}")
        for name, value in drawn.headers.items():
            connection.putheader(name, value)
        connection.putheader("Content-Length", str(len(drawn.content or b"")))
        connection.endheaders(drawn.content or b"")
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def _armed(endpoint: RunningConsumer) -> dict[str, object]:
    status, body = _send(endpoint.port, Drawn("GET", "/faults", {}, None))
    assert status == 200
    armed: dict[str, object] = json.loads(body)["armed"]
    return armed


@pytest.mark.parametrize(("method", "path"), sorted(PROTOCOL), ids=[f"{m} {p}" for m, p in sorted(PROTOCOL)])
def test_no_input_answers_5xx_and_a_refusal_arms_nothing(endpoint: RunningConsumer, method: str, path: str) -> None:
    model = PROTOCOL[(method, path)]
    schema = model.model_json_schema() if model else None
    operation = Operation(method, path, [{"in": "query", "name": "point", "schema": {"type": "string"}}], schema)

    @settings(max_examples=examples(40), deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(drawn=requests_for(operation, (schema or {}).get("$defs", {})))
    def check(drawn: Drawn) -> None:
        endpoint.release()  # every example starts from nothing armed
        status, body = _send(endpoint.port, drawn)
        shown = f"{drawn.method} {drawn.url[:100]} {drawn.content!r:.200}: {status} {body[:200]!r}"
        assert status < 500, shown
        if status >= 400:
            assert _armed(endpoint) == {}, f"refused with {status}, yet a point is armed: {shown}"
            assert len(body) < 2_000 and "error" in json.loads(body), shown

    check()
    endpoint.release()


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data", ""])
def test_a_post_that_is_not_json_arms_nothing(endpoint: RunningConsumer, content_type: str) -> None:
    headers = {"content-type": content_type.encode()} if content_type else {}
    status, _ = _send(endpoint.port, Drawn("POST", "/faults", headers, ARM))
    assert status == 415 and _armed(endpoint) == {}


@pytest.mark.parametrize(
    "header", [("Origin", b"http://evil.example"), ("Origin", b"null"), ("Sec-Fetch-Site", b"cross-site")]
)
def test_a_foreign_origin_arms_nothing(endpoint: RunningConsumer, header: tuple[str, bytes]) -> None:
    drawn = Drawn("POST", "/faults", {"content-type": b"application/json", header[0]: header[1]}, ARM)
    status, _ = _send(endpoint.port, drawn)
    assert status == 403 and _armed(endpoint) == {}


@pytest.mark.parametrize("host", ["rebind.attacker.example", "rebind.attacker.example:9103", "localhost.evil.example"])
def test_a_foreign_host_reads_nothing_and_arms_nothing(endpoint: RunningConsumer, host: str) -> None:
    arm = Drawn("POST", "/faults", {"content-type": b"application/json"}, ARM)
    assert _send(endpoint.port, arm, host=host)[0] == 400
    assert _send(endpoint.port, Drawn("GET", "/faults", {}, None), host=host)[0] == 400
    assert _send(endpoint.port, Drawn("GET", "/metrics", {}, None), host=host)[0] == 400
    assert _armed(endpoint) == {}


def test_an_https_page_on_the_same_host_and_port_is_another_origin(endpoint: RunningConsumer) -> None:
    origin = f"https://127.0.0.1:{endpoint.port}".encode()
    drawn = Drawn("POST", "/faults", {"content-type": b"application/json", "Origin": origin}, ARM)
    assert _send(endpoint.port, drawn)[0] == 403 and _armed(endpoint) == {}


def test_the_same_origin_arms_and_a_teaching_strategy_is_refused(endpoint: RunningConsumer) -> None:
    origin = f"http://127.0.0.1:{endpoint.port}".encode()
    status, _ = _send(
        endpoint.port, Drawn("POST", "/faults", {"content-type": b"application/json", "Origin": origin}, ARM)
    )
    assert status == 200 and set(_armed(endpoint)) == {"after_claim"}
    endpoint.release()
    switch = Drawn("POST", "/strategy", {"content-type": b"application/json"}, b'{"strategy": "no_dedup"}')
    assert _send(endpoint.port, switch)[0] == 409
