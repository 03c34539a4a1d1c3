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


UNICODE_14_ADDITIONS = (
    (0x061D, 0x061D),
    (0x0870, 0x088E),
    (0x08B5, 0x08B5),
    (0x08C8, 0x08C9),
    (0x0C5D, 0x0C5D),
    (0x0CDD, 0x0CDD),
    (0x170D, 0x170D),
    (0x171F, 0x171F),
    (0x1B4C, 0x1B4C),
    (0x1B7D, 0x1B7E),
    (0x20C0, 0x20C0),
    (0x2C2F, 0x2C2F),
    (0x2C5F, 0x2C5F),
    (0x2E53, 0x2E5D),
    (0x9FFD, 0x9FFF),
    (0xA7C0, 0xA7C1),
    (0xA7D0, 0xA7D1),
    (0xA7D3, 0xA7D3),
    (0xA7D5, 0xA7D9),
    (0xA7F2, 0xA7F4),
    (0xFBC2, 0xFBC2),
    (0xFD40, 0xFD4F),
    (0xFDCF, 0xFDCF),
    (0xFDFE, 0xFDFF),
    (0x10570, 0x1057A),
    (0x1057C, 0x1058A),
    (0x1058C, 0x10592),
    (0x10594, 0x10595),
    (0x10597, 0x105A1),
    (0x105A3, 0x105B1),
    (0x105B3, 0x105B9),
    (0x105BB, 0x105BC),
    (0x10780, 0x10785),
    (0x10787, 0x107B0),
    (0x107B2, 0x107BA),
    (0x10F70, 0x10F81),
    (0x10F86, 0x10F89),
    (0x11071, 0x11072),
    (0x11075, 0x11075),
    (0x116B9, 0x116B9),
    (0x11740, 0x11746),
    (0x11AB0, 0x11ABF),
    (0x12F90, 0x12FF2),
    (0x16A70, 0x16ABE),
    (0x16AC0, 0x16AC9),
    (0x1AFF0, 0x1AFF3),
    (0x1AFF5, 0x1AFFB),
    (0x1AFFD, 0x1AFFE),
    (0x1B11F, 0x1B122),
    (0x1CF50, 0x1CFC3),
    (0x1D1E9, 0x1D1EA),
    (0x1DF00, 0x1DF1E),
    (0x1E290, 0x1E2AD),
    (0x1E7E0, 0x1E7E6),
    (0x1E7E8, 0x1E7EB),
    (0x1E7ED, 0x1E7EE),
    (0x1E7F0, 0x1E7FE),
    (0x1F6DD, 0x1F6DF),
    (0x1F7F0, 0x1F7F0),
    (0x1F979, 0x1F979),
    (0x1F9CC, 0x1F9CC),
    (0x1FA7B, 0x1FA7C),
    (0x1FAA9, 0x1FAAC),
    (0x1FAB7, 0x1FABA),
    (0x1FAC3, 0x1FAC5),
    (0x1FAD7, 0x1FAD9),
    (0x1FAE0, 0x1FAE7),
    (0x1FAF0, 0x1FAF6),
    (0x2A6DE, 0x2A6DF),
    (0x2B735, 0x2B738),
)
"""The letters, numbers, punctuation and symbols Unicode 14 assigned, as ranges. Python 3.11 (Unicode
14) takes them for printable; Java 17 (Unicode 13) has them unassigned, and its consumer refuses a
type or key holding one as unprintable. A copy drawn with one is poison to one implementation and
a duplicate to another, so the copies draw none."""
_NOT_EVERYWHERE = "".join(chr(c) for first, last in UNICODE_14_ADDITIONS for c in range(first, last + 1))
_printable = st.text(
    st.characters(codec="utf-8", categories=["L", "N", "P", "S"], exclude_characters=_NOT_EVERYWHERE),
    min_size=1,
    max_size=20,
)
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
