"""The proof that each of an order's effects happened once: for the reservation, the charge, the
email and the sales projection row, the chain that led to it (the event in its outbox, every
delivery of it to the consumer that makes the effect, the marker that consumer claimed, the
business rows, the remote calls and what the outside world holds) and one sentence saying why
it happened once, or what went wrong. Pure: reading/proof_facts.py reads the facts."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from itertools import pairwise
from typing import Any

from chaos_panel.domain.timeline import position
from chaos_panel.reading.records import OutboxEvent


@dataclass(frozen=True)
class EffectSpec:
    name: str
    consumer: str
    trigger: str
    """The event type whose delivery makes the effect."""
    noun: str
    """The effect in a sentence: "the reservation"."""
    remote: str = ""
    """The outside world the effect reaches, if any: payment provider, mail."""


EFFECTS = (
    EffectSpec("Reservation", "inventory-reservation-v1", "OrderPlaced", "the reservation"),
    EffectSpec("Charge", "payment-authorization-v1", "InventoryReserved", "the payment attempt", "payment provider"),
    EffectSpec("Email", "notification-dispatch-v1", "PaymentAuthorized", "the email to send", "mail"),
    EffectSpec("Sales projection row", "sales-projection-v1", "PaymentAuthorized", "the projection row"),
)


DUPLICATES = ("duplicate", "duplicate_with_different_content")
"""The outcomes of a copy whose marker was found: nothing done."""


@dataclass(frozen=True)
class Delivery:
    at: float
    outcome: str
    where: str
    """topic/partition @ offset, or empty when the record does not say."""
    found_ahead: bool = False
    differing: tuple[str, ...] = ()
    """For a copy with other content than the one applied: the fields that differ."""


@dataclass(frozen=True)
class Facts:
    """What was read about one order: its outbox events, what the processes told, what each
    database holds (rows as short texts, never a payload or an address)."""

    idempotency_key: str | None
    events: list[OutboxEvent]
    told: list[dict[str, Any]]
    """Telemetry records for the order: deliveries and remote calls."""
    markers: dict[tuple[str, str], datetime]
    """(consumer, message id) -> when the marker was claimed."""
    rows: dict[str, list[str]]
    """Effect name -> its business rows."""
    outside: dict[str, list[str]]
    """Effect name -> what the outside world holds for the order (charges, messages received)."""
    lossy_failovers: list[float] = field(default_factory=list)
    """When a failover to an asynchronous standby happened (epoch seconds): each may have taken
    back commits whose messages were acknowledged (docs/postgres-failover.md)."""


@dataclass
class EffectProof:
    spec: EffectSpec
    event: OutboxEvent | None
    deliveries: list[Delivery] = field(default_factory=list)
    marker: datetime | None = None
    rows: list[str] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    keys: set[str] = field(default_factory=set)
    """The idempotency keys those calls carried."""
    outside: list[str] = field(default_factory=list)
    taken_back: int = 0
    """Applications a failover to an asynchronous standby took back (each followed by one)."""
    verdict: str = "waiting"
    """once, waiting, none (the effect was never due), or wrong"""
    sentence: str = ""


def _deliveries(told: list[dict[str, Any]], consumer: str, message_id: str) -> list[Delivery]:
    found = []
    for record in told:
        if record.get("kind") != "delivery" or record.get("consumer") != consumer:
            continue
        if record.get("message_id") != message_id:
            continue
        found.append(
            Delivery(
                float(record.get("at", 0)),
                str(record.get("outcome")),
                position(record),
                record.get("found") == "ahead",
                tuple(map(str, record.get("differing_fields") or ())),
            )
        )
    return sorted(found, key=lambda d: d.at)


def _taken_back(deliveries: list[Delivery], failovers: list[float]) -> int:
    """How many applications a failover to an asynchronous standby followed before the next one."""
    applied = [d.at for d in deliveries if d.outcome == "applied"]
    return sum(1 for first, then in pairwise(applied) if any(first < at < then for at in failovers))


def _remote_calls(told: list[dict[str, Any]], remote: str) -> list[dict[str, Any]]:
    calls = [r for r in told if r.get("kind") == "remote_call" and r.get("service") == remote]
    return sorted(calls, key=lambda r: float(r.get("at", 0)))


def _sentence(proof: EffectProof) -> tuple[str, str]:
    spec, event = proof.spec, proof.event
    if event is None:
        return "none", f"No {spec.name.lower()}: no {spec.trigger} was written for this order, so none was due."
    applied = [d for d in proof.deliveries if d.outcome == "applied"]
    copies = [d for d in proof.deliveries if d.outcome in DUPLICATES]
    other_content = sorted({field for d in copies for field in d.differing})
    if len(applied) > 1 and proof.taken_back == len(applied) - 1 and proof.marker is not None and proof.rows:
        return "once", (
            f"Once: {spec.consumer} applied {spec.trigger} {len(applied)} times, but a failover to an asynchronous "
            f"standby took back {'the first' if proof.taken_back == 1 else f'the first {proof.taken_back}'} after "
            f"Kafka was told: the marker and {spec.noun} went with it. The rewind that followed applied it again, "
            "and that marker is the only one."
        )
    if len(applied) > 1:
        return "wrong", (
            f"Applied {len(applied)} times: {spec.consumer} did not find its marker for a copy of "
            f"{spec.trigger}, so {spec.noun} was made again (a teaching strategy?)."
        )
    if proof.marker is not None and not proof.rows:
        return "wrong", f"Lost: {spec.consumer}'s marker for {spec.trigger} is committed, but {spec.noun} is not there."
    if proof.rows and proof.marker is None:
        return "wrong", (
            f"Unguarded: {spec.noun} is there without {spec.consumer}'s marker, so a redelivery of "
            f"{spec.trigger} would make it again."
        )
    if proof.marker is None:
        return "waiting", f"Waiting: {spec.trigger} has not been applied by {spec.consumer} yet."
    if not copies:
        once = (
            f"Once: one delivery of {spec.trigger} claimed {spec.consumer}'s marker in the same transaction "
            f"as {spec.noun}; a copy would find that marker and change nothing."
        )
    else:
        once = (
            f"Once: {spec.trigger} reached {spec.consumer} {len(applied) + len(copies)} times; "
            f"{'the first claimed' if applied else 'one claimed'} the marker in the same transaction as {spec.noun}, "
            f"and {'the copy' if len(copies) == 1 else f'the {len(copies)} copies'} after found it and changed nothing."
        )
    if other_content:
        once += (
            f" A copy came under the same id with another {', '.join(other_content)}: the marker is keyed by"
            " the id alone, so it was a duplicate all the same, counted apart as a producer's bug."
        )
    if spec.remote and proof.calls:
        once += (
            f" Its {len(proof.calls)} call{'s' if len(proof.calls) != 1 else ''} to the {spec.remote} carried "
            f"{'one key' if len(proof.keys) == 1 else f'{len(proof.keys)} keys'}, so the {spec.remote} made it once."
        )
    return "once", once


def build(facts: Facts) -> list[EffectProof]:
    proofs = []
    for spec in EFFECTS:
        event = next((e for e in facts.events if e.event_type == spec.trigger), None)
        proof = EffectProof(spec, event)
        if event is not None:
            proof.deliveries = _deliveries(facts.told, spec.consumer, event.message_id)
            proof.marker = facts.markers.get((spec.consumer, event.message_id))
        proof.rows = list(facts.rows.get(spec.name, []))
        proof.outside = list(facts.outside.get(spec.name, []))
        calls = _remote_calls(facts.told, spec.remote) if spec.remote else []
        proof.calls = [
            f"call {c.get('call')} with Idempotency-Key {c.get('idempotency_key')}: {c.get('result')}" for c in calls
        ]
        proof.keys = {str(c.get("idempotency_key")) for c in calls}
        proof.taken_back = _taken_back(proof.deliveries, facts.lossy_failovers)
        proof.verdict, proof.sentence = _sentence(proof)
        proofs.append(proof)
    return proofs
