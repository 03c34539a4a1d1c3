"""Copies of a message: the same message id with other content, as a producer's bug makes them.

Given a `Record` (an event as the relays send it), `copy_changes()` is a
Hypothesis strategy of changes to every field a copy can carry besides its id, each named as the
runtime names it (the database's message_content_fields(), migration 0008). The contract suite's
properties apply any of them to an applied message and expect one marker, one effect, no new
outbox row, and the copy counted apart with exactly those fields named.

Hypothesis is the suite's only dependency beyond the runtime's: `pip install effectively-once[contract]`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from hypothesis import strategies as st

from .record import Record

__all__ = ["CONTENT_FIELDS", "Change", "Record", "copy_changes", "copy_of", "fields_of"]

CONTENT_FIELDS = (
    "type",
    "version",
    "key",
    "occurred_at",
    "trace_id",
    "payload",
    "envelope_extras",
    "record_key",
    "headers",
)
"""Every field of a copy besides its id, as the runtime names them when they differ."""
DELIVERY_HEADERS = ("eo-injected", "eo-redriven-from")
"""Headers the platform's tools add to tell how a copy was delivered: not content."""


@dataclass(frozen=True)
class Change:
    """One field changed in a copy: `field` is its name, `drawn` what Hypothesis drew for it."""

    field: str
    drawn: Any

    def apply(self, body: dict[str, Any], record: Record) -> tuple[dict[str, Any], Record]:
        """`body` and `record` with this field changed (always to something other than it was)."""
        value = self.drawn
        if self.field == "occurred_at":
            moved = datetime.fromisoformat(body["occurred_at"]) + timedelta(seconds=value)
            return {**body, "occurred_at": moved.isoformat()}, record
        if self.field == "payload":
            return {**body, "payload": {**body.get("payload", {}), "copied": value}}, record
        if self.field in ("type", "key"):
            return {**body, self.field: _other(body[self.field], value, 100 if self.field == "type" else 255)}, record
        if self.field == "version":
            return {**body, "version": body.get("version", 1) + value}, record
        if self.field == "trace_id":
            return {**body, "trace_id": _other(body.get("trace_id") or "", value, 255)}, record
        if self.field == "envelope_extras":
            return {**body, "copied_" + value: True}, record
        if self.field == "record_key":
            return body, Record(record.value, (record.key or b"") + value, record.headers)
        if self.field == "headers":
            name, content = value
            return body, Record(record.value, record.key, (*record.headers, (name, content)))
        raise ValueError(f"no such field: {self.field}")


def _other(before: str, suffix: str, limit: int) -> str:
    changed = (before + suffix)[:limit]
    return changed if changed != before else suffix


_printable = st.text(st.characters(codec="utf-8", categories=["L", "N", "P", "S"]), min_size=1, max_size=20)
_json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | _printable,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_printable, inner, max_size=3),
    max_leaves=8,
)
_header_names = st.text(st.characters(codec="ascii", categories=["L", "N"]), min_size=1, max_size=16).map(
    lambda name: "x-" + name
)


def _drawn(field: str) -> st.SearchStrategy[Any]:
    if field == "occurred_at":
        return st.sampled_from([1, 3600, -86400, 86400]) | st.integers(-(10**8), 10**8).filter(bool)
    if field == "payload":
        return _json_values
    if field in ("type", "key", "trace_id"):
        return _printable
    if field == "version":
        return st.integers(1, 1000)
    if field == "envelope_extras":
        return st.text(st.characters(codec="ascii", categories=["Ll"]), min_size=1, max_size=12)
    if field == "record_key":
        return st.binary(min_size=1, max_size=16)
    return st.tuples(_header_names, st.binary(max_size=16) | st.none())


def _change(field: str) -> st.SearchStrategy[Change]:
    return st.builds(Change, st.just(field), _drawn(field))


def _changes(names: list[str]) -> st.SearchStrategy[list[Change]]:
    return st.tuples(*(_change(name) for name in names)).map(list)


def copy_changes(fields: Sequence[str] = CONTENT_FIELDS) -> st.SearchStrategy[list[Change]]:
    """One or more distinct fields of `fields`, each changed."""
    chosen = st.lists(st.sampled_from(list(fields)), min_size=1, max_size=len(fields), unique=True)
    return chosen.flatmap(_changes)


def copy_of(record: Record, changes: Sequence[Change]) -> Record:
    """The record with every change applied; its message id (envelope and header) kept."""
    body: dict[str, Any] = json.loads(record.value)
    for change in changes:
        body, record = change.apply(body, record)
    value = json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()
    return Record(value, record.key, record.headers)


def fields_of(changes: Sequence[Change]) -> set[str]:
    return {change.field for change in changes}
