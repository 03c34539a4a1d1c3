from __future__ import annotations

import json
import uuid

import pytest

from effectively_once.envelope import MAX_BODY_BYTES, Envelope, PoisonMessage, decode


def _body(**changes: object) -> bytes:
    base = json.loads(Envelope.new("OrderPlaced", "order-1", {"sku": "a"}).to_json())
    base.update(changes)
    return json.dumps({k: v for k, v in base.items() if v is not ...}).encode()


def test_an_envelope_survives_a_round_trip() -> None:
    event = Envelope.new("OrderPlaced", "order-1", {"sku": "a", "quantity": 2}, trace_id="t-1")
    assert decode(event.to_json()) == event


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        (None, "empty_body"),
        (b"", "empty_body"),
        (b"\xff\xfe", "undecodable"),
        (b"[1, 2]", "undecodable"),
        (b"x" * (MAX_BODY_BYTES + 1), "oversized"),
        (_body(message_id=...), "missing_message_id"),
        (_body(message_id=""), "missing_message_id"),
        (_body(message_id=42), "invalid_message_id"),
        (_body(message_id="m" * 256), "invalid_message_id"),
        (_body(message_id="a\x00b"), "undecodable"),  # a NUL no database string can hold
        (_body(payload={"note": "\ud800"}), "undecodable"),  # a lone surrogate, escaped
        (_body(payload={"amount": float("nan")}), "undecodable"),  # NaN is not JSON
        (b"[" * 5000 + b"]" * 5000, "undecodable"),  # nested past any parser's depth
        (_body(type=...), "invalid_type"),
        (_body(key="line\nbreak"), "invalid_key"),
        (_body(version=0), "invalid_version"),
        (_body(version=True), "invalid_version"),
        (_body(occurred_at="2026-01-01T00:00:00"), "invalid_occurred_at"),
        (_body(occurred_at="soon"), "invalid_occurred_at"),
        (_body(trace_id=7), "invalid_trace_id"),
        (_body(payload=[1]), "invalid_payload"),
    ],
)
def test_bad_input_is_refused_with_its_reason(raw: bytes | None, reason: str) -> None:
    with pytest.raises(PoisonMessage) as refused:
        decode(raw)
    assert refused.value.reason == reason


def test_a_refusal_after_the_id_was_read_names_the_message() -> None:
    message_id = str(uuid.uuid4())
    with pytest.raises(PoisonMessage) as refused:
        decode(_body(message_id=message_id, version="two"))
    assert refused.value.message_id == message_id


def test_a_hostile_but_valid_string_is_kept_as_data() -> None:
    hostile = "'); DROP TABLE processed_message; -- <script>"
    assert decode(_body(message_id=hostile)).message_id == hostile


def test_an_escaped_surrogate_pair_and_an_escaped_backslash_are_kept() -> None:
    raw = _body(payload={"emoji": "\U0001f600", "path": "C:\\u0000"})
    assert decode(raw).payload == {"emoji": "\U0001f600", "path": "C:\\u0000"}


def test_a_message_whose_header_names_another_id_is_poison_named_by_its_envelope_id() -> None:
    event = Envelope.new("OrderPlaced", "order-1", {})
    with pytest.raises(PoisonMessage) as refused:
        decode(event.to_json(), [("eo-message-id", b"another-id")], b"order-1")
    assert (refused.value.reason, refused.value.message_id) == ("message_id_mismatch", event.message_id)
    with pytest.raises(PoisonMessage, match="message_id_mismatch"):
        decode(event.to_json(), [("eo-message-id", event.message_id.encode()), ("eo-message-id", None)], None)


def test_a_message_from_kafka_keeps_its_body_key_and_headers_for_its_content_digest() -> None:
    event = Envelope.new("OrderPlaced", "order-1", {"sku": "a"})
    headers = [("eo-message-id", event.message_id.encode()), ("x-note", None)]
    received = decode(event.to_json(), headers, b"order-1")
    assert received == event, "how it arrived is not part of the event's equality"
    body, delivery = received.content()
    assert body == event.to_json().decode()
    assert json.loads(delivery or "") == {
        "key": b"order-1".hex(),
        "headers": {"eo-message-id": [event.message_id.encode().hex()], "x-note": [None]},
    }
    assert event.content() == (event.to_json().decode(), None), "made in process: no record"
