from __future__ import annotations

import io
import json
from typing import Any

from services.idempotent_consumer.control import control_app
from services.idempotent_consumer.faults import FaultAction, FaultPoints


def _call(faults: FaultPoints, method: str, path: str, body: object = None, query: str = "") -> tuple[str, Any]:
    raw = json.dumps(body).encode() if body is not None else b""
    environ = {
        "REQUEST_METHOD": method,
        "PATH_INFO": path,
        "QUERY_STRING": query,
        "CONTENT_LENGTH": str(len(raw)),
        "wsgi.input": io.BytesIO(raw),
    }
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
