"""What the contract's copies draw (effectively_once/contract/copies.py): text every implementation
reads alike, whatever the Unicode tables of its runtime."""

from __future__ import annotations

import pytest
from hypothesis import given

from effectively_once.contract import copies

pytestmark = pytest.mark.unit


def test_unicode_14s_additions_are_printable_here_so_only_java_17_refuses_them() -> None:
    added = [chr(c) for first, last in copies.UNICODE_14_ADDITIONS for c in range(first, last + 1)]
    assert len(added) == 723
    assert "\u061d" in added  # ARABIC END OF TEXT MARK: Po here, UNASSIGNED to Java 17's Character.getType
    assert all(character.isprintable() for character in added)


@given(copies.copy_changes(["key", "type", "trace_id"]))
def test_a_copys_text_fields_hold_no_character_that_unicode_14_added(changes: list[copies.Change]) -> None:
    for change in changes:
        assert not set(change.drawn) & set(copies._NOT_EVERYWHERE), change
