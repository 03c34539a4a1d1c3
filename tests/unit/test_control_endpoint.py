from __future__ import annotations

import io
import json
from typing import Any

from effectively_once.control_endpoint import control_app
from effectively_once.faults import FaultAction, FaultPoints


def environ_of(method: str, path: str, raw: bytes = b"", query: str = "", **headers: str) -> dict[str, Any]:
    """A WSGI request as a local client sends it (loopback Host, a JSON body); `headers` override."""
    return {
        "REQUEST_METHOD": method,
        "PATH_INFO": path,
        "QUERY_STRING": query,
        "CONTENT_LENGTH": str(len(raw)),
        "CONTENT_TYPE": "application/json",
        "HTTP_HOST": "127.0.0.1:9103",
        "wsgi.input": io.BytesIO(raw),
        **headers,
    }


def _call(faults: FaultPoints, method: str, path: str, body: object = None, query: str = "") -> tuple[str, Any]:
    raw = json.dumps(body).encode() if body is not None else b""
    environ = environ_of(method, path, raw, query)
    status: list[str] = []
    chunks = control_app(faults)(environ, lambda s, _headers: status.append(s))
    payload = b"".join(chunks)
    return status[0], json.loads(payload) if path == "/faults" or status[0].startswith("4") else payload


def test_arming_listing_and_disarming_a_point() -> None:
    faults = FaultPoints()
    status, _ = _call(faults, "POST", "/faults", {"point": "after_claim", "action": "stall", "times": "always"})
    assert status == "200 OK"
    assert faults.armed()["after_claim"].action is FaultAction.STALL
    assert faults.armed()["after_claim"].remaining is None
    status, listing = _call(faults, "GET", "/faults")
    assert "after_commit_before_ack" in listing["points"]
    assert listing["armed"]["after_claim"]["action"] == "stall"
    _call(faults, "DELETE", "/faults", query="point=after_claim")
    assert faults.armed() == {}


def test_an_unknown_point_or_action_is_refused_with_a_reason() -> None:
    faults = FaultPoints()
    status, body = _call(faults, "POST", "/faults", {"point": "nowhere", "action": "crash"})
    assert status == "400 Bad Request" and "unknown fault point" in body["error"]
    status, body = _call(faults, "POST", "/faults", {"point": "after_claim", "action": "explode"})
    assert status == "400 Bad Request"
    status, body = _call(faults, "POST", "/faults", {"action": "crash"})
    assert status == "400 Bad Request"
    assert faults.armed() == {}


def test_metrics_are_served() -> None:
    status, payload = _call(FaultPoints(), "GET", "/metrics")
    assert status.startswith("200")
    assert b"eo_consumer_messages_total" in payload or b"# HELP" in payload


class _FakeConsumerProcess:
    consumer_name = "ledger-v1"

    def __init__(self) -> None:
        self.current = "correct"
        self.rewound: list[int | None] = []

    def strategy(self) -> str:
        return self.current

    def strategies(self) -> list[str]:
        return ["correct", "check_then_act"]

    def set_strategy(self, strategy: str) -> None:
        if strategy not in self.strategies():
            raise ValueError(f"strategy {strategy!r} is not installed in this process")
        self.current = strategy

    def rewind(self, to_timestamp_ms: int | None) -> list[dict[str, Any]]:
        self.rewound.append(to_timestamp_ms)
        return [{"topic": "t", "partition": 0, "offset": "beginning"}]

    def hold(self, topic: str, seconds: float) -> list[dict[str, Any]]:
        if topic != "t":
            raise ValueError(f"ledger-v1 does not consume {topic!r}")
        self.held = (topic, seconds)
        return [{"topic": topic, "partition": 0, "held": seconds > 0}]

    def holds(self) -> dict[str, Any]:
        return {"consumer": self.consumer_name, "topics": ["t"], "held": {"t": 3.0} if self.held else {}}

    def horizon(self) -> dict[str, Any]:
        return {"consumer": self.consumer_name, "seconds": self.seconds, "configured_seconds": 2592000.0}

    seconds: float | None = 2592000.0
    held: tuple[str, float] | None = None

    def set_horizon(self, seconds: float | None, purge: bool) -> dict[str, Any]:
        self.seconds = 2592000.0 if seconds is None else seconds
        return self.horizon() | {"purged": 3 if purge else 0}


def _runtime_call(runtime: _FakeConsumerProcess, method: str, path: str, body: object = None) -> tuple[str, Any]:
    raw = json.dumps(body).encode() if body is not None else b""
    environ = environ_of(method, path, raw)
    status: list[str] = []
    payload = b"".join(control_app(FaultPoints(), runtime=runtime)(environ, lambda s, _h: status.append(s)))
    return status[0], json.loads(payload)


def test_a_consumer_process_reports_and_switches_its_strategy() -> None:
    runtime = _FakeConsumerProcess()
    status, body = _runtime_call(runtime, "GET", "/strategy")
    assert status == "200 OK" and body["strategy"] == "correct" and "check_then_act" in body["strategies"]
    status, _ = _runtime_call(runtime, "POST", "/strategy", {"strategy": "check_then_act"})
    assert status == "200 OK" and runtime.current == "check_then_act"
    status, body = _runtime_call(runtime, "POST", "/strategy", {"strategy": "trust me"})
    assert status.startswith("400") and "strategy: Input should be" in body["error"]
    status, body = _runtime_call(runtime, "POST", "/strategy", {"strategy": "no_dedup"})
    assert status.startswith("409") and "not installed" in body["error"]
    assert runtime.current == "check_then_act"
    assert runtime.current == "check_then_act"


def test_a_rewind_takes_the_beginning_or_a_zoned_time() -> None:
    runtime = _FakeConsumerProcess()
    assert _runtime_call(runtime, "POST", "/rewind", {"to": "beginning"})[0] == "200 OK"
    assert _runtime_call(runtime, "POST", "/rewind", {"to": "2026-12-02T12:00:00Z"})[0] == "200 OK"
    assert runtime.rewound == [None, 1796212800000]
    status, body = _runtime_call(runtime, "POST", "/rewind", {"to": "2026-12-02T12:00:00"})
    assert status.startswith("400") and "zone" in body["error"]
    status, body = _runtime_call(runtime, "POST", "/rewind", {"to": 5})
    assert status.startswith("400")


def test_a_hold_names_a_topic_and_a_bounded_time() -> None:
    runtime = _FakeConsumerProcess()
    status, body = _runtime_call(runtime, "POST", "/hold", {"topic": "t", "seconds": 20})
    assert status == "200 OK" and runtime.held == ("t", 20.0) and body["partitions"][0]["held"]
    assert _runtime_call(runtime, "GET", "/hold")[1]["held"] == {"t": 3.0}
    assert _runtime_call(runtime, "POST", "/hold", {"topic": "t", "seconds": 0})[0] == "200 OK"
    for bad in ({"topic": "t", "seconds": 601}, {"topic": "t", "seconds": -1}, {"seconds": 5}):
        status, body = _runtime_call(runtime, "POST", "/hold", bad)
        assert status.startswith("400"), bad
    status, body = _runtime_call(runtime, "POST", "/hold", {"topic": "other", "seconds": 5})
    assert status.startswith("400") and "does not consume" in body["error"]


def test_the_horizon_can_be_shortened_with_a_purge_and_restored() -> None:
    runtime = _FakeConsumerProcess()
    status, body = _runtime_call(runtime, "POST", "/horizon", {"seconds": 10, "purge": True})
    assert status == "200 OK" and body["seconds"] == 10 and body["purged"] == 3
    status, body = _runtime_call(runtime, "POST", "/horizon", {"seconds": None})
    assert status == "200 OK" and body["seconds"] == body["configured_seconds"]
    status, body = _runtime_call(runtime, "POST", "/horizon", {"seconds": 0.5})
    assert status.startswith("400") and "greater than or equal to 1" in body["error"]
    assert _runtime_call(runtime, "GET", "/horizon")[1]["consumer"] == "ledger-v1"


def test_processes_without_a_consumer_have_no_strategy_to_switch() -> None:
    status: list[str] = []
    control_app(FaultPoints())(environ_of("GET", "/strategy"), lambda s, _h: status.append(s))
    assert status[0].startswith("404")
